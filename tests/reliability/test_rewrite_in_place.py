"""A dataset rewritten in place under a running job: one version of each shard, or an error.

An MDS index names no version of its shards. Here the second version of the dataset has the
same keys, the same shard sizes and a byte-identical ``index.json`` (every sample keeps its
length, its bytes are flipped): nothing but the shards' versions tells the two apart. The
first batch is read by ranged GETs (in the loader's main process when it has workers), the
whole-shard downloads are held at the proxy until the test has rewritten the dataset, then go
on: a shard's first samples came from the first version and its download would bring the
second. That is an ``ObjectChangedError`` naming the shard, and no shard file of the second
version is left in the cache for the shards read before (``runtime/versions.py``).
"""

from __future__ import annotations

import os
import re
import time
import uuid
from typing import Any

import numpy as np
import pytest

from astream import StreamingDataLoader
from astream.errors import ObjectChangedError
from astream.runtime.range_costs import StoreCosts
from astream.runtime.versions import XATTR
from astream.storage.sync import upload

from .conftest import Cloud, MakeProxy
from .test_first_batch import N, big, dataset, shard_sizes, write_big


def flipped(i: int) -> bytes:
    return bytes(b ^ 0xFF for b in big(i))


@pytest.fixture(scope="module")
def two_versions(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    root = tmp_path_factory.mktemp("rw")
    one = write_big(str(root / "one"))
    two = write_big(str(root / "two"), data=flipped)
    assert shard_sizes(one) == shard_sizes(two)
    with (
        open(os.path.join(one, "index.json"), "rb") as a,
        open(os.path.join(two, "index.json"), "rb") as b,
    ):
        assert a.read() == b.read()  # the index cannot tell the versions apart
    return one, two


def _held_downloads(sizes: dict[str, int]) -> Any:
    """Whole-shard downloads (``bytes=0-<size - 1>``), not the first batch's ranges."""

    def match(method: str, path: str, rng: str) -> bool:
        name = path.rsplit("/", 1)[-1]
        return method == "GET" and name in sizes and rng == f"bytes=0-{sizes[name] - 1}"

    return match


def _behind_gate(
    cloud: Cloud, versions: tuple[str, str], make_proxy: MakeProxy
) -> tuple[str, Any, Any]:
    """The first version uploaded (its URL), a proxy to the server, and the gate that holds
    the proxy's whole-shard downloads until it is set."""
    one, _ = versions
    url = cloud.upload(one, "rw")
    proxy = make_proxy(cloud.server.url)
    return url, proxy, proxy.hold(_held_downloads(shard_sizes(one)))


def _run(
    cloud: Cloud,
    versions: tuple[str, str],
    make_proxy: MakeProxy,
    cache: str,
    workers: int,
    rewrite: bool,
    ranged: set[str] | None = None,
    main: list[Any] | None = None,
    urls: list[str] | None = None,
) -> list[tuple[int, bytes]]:
    """The epoch's (id, bytes), the downloads held until the first batch is out and the
    dataset is rewritten (``rewrite``); ``ranged`` gets the shards read by ranges before,
    ``main`` the loader's process's versions after the first batch and at the end, ``urls``
    the dataset's URL."""
    one, two = versions
    url, proxy, gate = _behind_gate(cloud, versions, make_proxy)
    if urls is not None:
        urls.append(url)
    sizes = shard_sizes(one)
    ds = dataset(url, cloud.via(proxy), cache, 8)
    got: list[tuple[int, bytes]] = []
    it = iter(StreamingDataLoader(ds, batch_size=16, num_workers=workers))
    try:
        first = next(it)
        got += [(int(i), bytes(d)) for i, d in zip(first["id"], first["data"])]
        assert all(d == big(i) for i, d in got)  # read by ranges, the first version
        whole = _held_downloads(sizes)  # none came back yet: they come after the rewrite
        assert not [r for r in proxy.stats.answered if whole("GET", r[0], r[1])]
        if ranged is not None:
            names = (path.rsplit("/", 1)[-1] for path, _, _ in proxy.stats.answered)
            ranged.update(n for n in names if n in sizes)
        if main is not None:
            main.append(dict(ds.engine._parts().fetcher.versions._unchecked))
        if rewrite:
            upload(two, url, **cloud.options())  # in place: same keys, sizes and index
        gate.set()
        for b in it:
            got += [(int(i), bytes(d)) for i, d in zip(b["id"], b["data"])]
        if main is not None:
            main.append(ds.engine._parts().fetcher.versions.unchecked())
    finally:
        gate.set()
        del it
    return got


@pytest.mark.parametrize("workers", [0, 2])
def test_a_shard_rewritten_mid_epoch_is_refused(
    cloud: Cloud,
    two_versions: tuple[str, str],
    make_proxy: MakeProxy,
    tmp_path: Any,
    workers: int,
) -> None:
    one, two = two_versions
    sizes = shard_sizes(one)
    cache = str(tmp_path / "cache")
    ranged: set[str] = set()
    urls: list[str] = []
    with pytest.raises(ObjectChangedError, match="rewritten while this job reads it") as ei:
        _run(cloud, two_versions, make_proxy, cache, workers, True, ranged=ranged, urls=urls)
    assert re.search(r"shard\.\d{5}\.mds", str(ei.value))  # names the shard object
    assert ranged  # the first batch was read by ranges, before the rewrite

    # temporaries are never trusted: a worker the loader stopped mid-download (its shutdown
    # after the error) leaves its own, and the next download of that shard drops it. (A
    # download the abandoned iteration still runs in this process drops its own when it ends:
    # usually at once, once after over 30 s on fake-gcs-server, so not awaited here.)
    deadline = time.monotonic() + 10
    while _tmps(cache) and time.monotonic() < deadline:
        time.sleep(0.1)
    dead = [n for n in _tmps(cache) if not os.path.exists(f"/proc/{_pid_of(n)}")]
    if dead:
        after = dataset(urls[0], cloud.options(), cache, 8)
        for n in dead:
            assert after.prepare_shard(int(n.split(".")[1]))
        assert not set(dead) & set(_tmps(cache))
    for name in os.listdir(cache):
        if name not in sizes:
            continue
        with open(os.path.join(cache, name), "rb") as f:
            data = f.read()
        # a whole shard of one version, never parts of both; and one that names its version
        assert data in (_bytes(one, name), _bytes(two, name)), name
        assert os.getxattr(os.path.join(cache, name), XATTR)
        if workers == 0 and name in ranged:
            # read by ranges at the first version: its download was refused (with workers,
            # another worker, which read none of it, may download the second version whole)
            assert data == _bytes(one, name), name


def _tmps(cache: str) -> list[str]:
    return [n for n in os.listdir(cache) if ".tmp-" in n]


def _pid_of(tmp: str) -> int:
    return int(tmp.split(".tmp-")[1].split("-")[0])


def _bytes(root: str, name: str) -> bytes:
    with open(os.path.join(root, name), "rb") as f:
        return f.read()


def test_no_rewrite_no_error(
    cloud: Cloud, two_versions: tuple[str, str], make_proxy: MakeProxy, tmp_path: Any
) -> None:
    """The same run with nothing rewritten: every sample once, of the one version (the held
    downloads, then conditional on the versions the ranges named, are not refused)."""
    main: list[Any] = []
    got = _run(cloud, two_versions, make_proxy, str(tmp_path / "c"), 2, rewrite=False, main=main)
    assert sorted(i for i, _ in got) == list(range(N))
    assert all(d == big(i) for i, d in got)
    # the loader's process read the workers' first batches by ranges, and compared every one
    # of those shards' files, which only the workers opened, before the epoch's last batch
    after_first, at_end = main
    assert after_first and at_end == []


def test_fresh_job_reads_the_new_version(
    two_versions: tuple[str, str], s3_server: Any, s3_bucket: str, tmp_path: Any
) -> None:
    """The versions are one job's: a job started after the rewrite reads the new bytes."""
    one, two = two_versions
    url = f"{s3_bucket}/rw-{uuid.uuid4().hex[:8]}"
    opts = {"endpoint_url": s3_server.url, "region": "us-east-1", "path_style": True}
    upload(one, url, **opts)
    upload(two, url, **opts)
    ds = dataset(url, opts, str(tmp_path / "c"), 8)
    got = [(int(s["id"]), bytes(s["data"])) for s in ds]
    assert sorted(i for i, _ in got) == list(range(N))
    assert all(d == flipped(i) for i, d in got)


def test_a_file_of_another_version_is_refused_where_ranges_were_read(
    cloud: Cloud, two_versions: tuple[str, str], tmp_path: Any
) -> None:
    """Random access reads a sample by ranges (``ds[i]`` on a cold cache); the dataset is
    rewritten; another engine on the same cache (as another worker process has) downloads the
    shard, which then names the second version. The first engine's next read of that shard
    opens the cached file: refused, since it read the first version by ranges; the other
    engine, which read only the file, goes on reading it."""
    one, two = two_versions
    url = cloud.upload(one, "rw")
    opts = cloud.options()
    cache = str(tmp_path / "c")
    ds = dataset(url, opts, cache, 8, shuffle=False)
    # a store whose requests cost far more than any shard (the latency estimate follows
    # measurements only slowly): the rent-or-buy rule never buys the shard in the background
    # here, so that it is read by ranges only (the rule itself: test_random_promotion.py)
    costs = StoreCosts()
    costs.latency = 1e6
    costs._latency_seen = True
    ds.engine._parts().costs[ds.engine.catalog.shards[0].remote] = costs
    assert (int(ds[0]["id"]), bytes(ds[0]["data"])) == (0, big(0))  # by ranges: no file
    assert 0 not in ds.engine._parts().bought
    shard = ds.engine.catalog.shards[0]
    assert not os.path.exists(shard.files.raw_path)
    # a random read's shard is compared when opened, never swept (random reads may touch
    # every shard: a sweep of them all before each open would cost an open per shard)
    assert ds.engine._parts().fetcher.versions.unchecked() == []
    upload(two, url, **opts)
    other = dataset(url, opts, cache, 8, shuffle=False)
    assert other.prepare_shard(0)
    assert os.getxattr(shard.files.raw_path, XATTR)
    with pytest.raises(ObjectChangedError, match="this process read it by ranges at version"):
        ds[1]
    assert bytes(other[1]["data"]) == flipped(1)


def test_a_file_of_another_version_is_refused_before_another_shard_opens(
    cloud: Cloud, two_versions: tuple[str, str], tmp_path: Any
) -> None:
    """An iteration's first samples of shard 0 are read by ranges (the path of every first
    batch); the dataset is rewritten; another engine downloads shards 0 and 1. The first
    engine next reads shard 1, from a file: before it opens any shard it compares the files
    of the shards whose first samples it read by ranges that have appeared since, so shard
    0's is refused although it never opens it (its other samples may be another worker's)."""
    from astream import bridge

    one, two = two_versions
    url = cloud.upload(one, "rw")
    opts = cloud.options()
    cache = str(tmp_path / "c")
    ds = dataset(url, opts, cache, 8, shuffle=False)
    got = bridge.run(ds.engine._range_batch([(0, [0, 1])]))
    assert bytes(got[0].sample(1)["data"]) == big(1)  # shard 0, by ranges
    assert not os.path.exists(ds.engine.catalog.shards[0].files.raw_path)
    upload(two, url, **opts)
    other = dataset(url, opts, cache, 8, shuffle=False)
    assert other.prepare_shard(0) and other.prepare_shard(1)
    first_of_1 = ds.engine.catalog.entries[0].samples
    with pytest.raises(ObjectChangedError, match=r"shard\.00000\.mds"):
        ds[first_of_1]


class _Mirrors:
    """Files from a directory, as two mirrors behind one name would serve them: every answer
    names the ETag of the server that sent it (inode-based ETags differ between servers),
    alternating from request to request. The bytes are the same."""

    def __init__(self, root: str) -> None:
        from aiohttp import web

        from astream.testing.servers import ThreadedApp

        self.requests = 0

        async def serve(request: web.Request) -> web.StreamResponse:
            self.requests += 1
            return web.FileResponse(os.path.join(root, request.match_info["name"]))

        async def name_the_mirror(request: web.Request, response: web.StreamResponse) -> None:
            if "ETag" in response.headers:
                response.headers["ETag"] = f'"mirror-{self.requests % 2}"'

        app = web.Application()
        app.router.add_get("/{name}", serve)
        app.on_response_prepare.append(name_the_mirror)
        self.app = ThreadedApp(app)

    def __enter__(self) -> _Mirrors:
        self.app.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.app.stop()


def test_mirrors_whose_etags_differ(two_versions: tuple[str, str], tmp_path: Any) -> None:
    """Over HTTP the ETag is taken as the object's version unless ``etags=False``: behind one
    name, mirrors whose ETags differ look like a rewrite (refused, naming both ETags), and
    with ``storage_options={"etags": False}`` the same data reads exact."""
    one, _ = two_versions
    with _Mirrors(one) as m:
        ds = dataset(m.app.url, {}, str(tmp_path / "a"), 8)
        with pytest.raises(ObjectChangedError, match=r"mirror-[01], then (mirror-[01]|another)"):
            list(ds)
        ds = dataset(m.app.url, {"etags": False}, str(tmp_path / "b"), 8)
        got = [(int(s["id"]), bytes(s["data"])) for s in ds]
        assert m.requests > len(shard_sizes(one))  # ranges, then downloads
    assert sorted(i for i, _ in got) == list(range(N))
    assert all(d == big(i) for i, d in got)


def _twin(ds: Any) -> Any:
    """``ds`` as one of its DataLoader workers has it (pickled): its own process parts, its
    dataset's board (``runtime/versions.py``)."""
    import pickle

    twin = pickle.loads(pickle.dumps(ds))
    assert twin.engine.board.path == ds.engine.board.path
    return twin


def test_another_process_of_the_dataset_downloads_only_its_version(
    cloud: Cloud, two_versions: tuple[str, str], make_proxy: MakeProxy, tmp_path: Any
) -> None:
    """Shard 0's first samples are read by ranges in one process; the dataset is rewritten;
    another process of the same dataset (a worker of a plain torch DataLoader, which gets no
    versions from its loader), having read nothing of shard 0, downloads it. Its download is
    conditional on the version on the dataset's board: refused, and nothing of the second
    version is in the cache. A new dataset (another job) on the same cache downloads it."""
    from astream import bridge

    one, two = two_versions
    sizes = shard_sizes(one)
    url = cloud.upload(one, "rw")
    opts = cloud.options()
    proxy = make_proxy(cloud.server.url)
    cache = str(tmp_path / "c")
    ds = dataset(url, cloud.via(proxy), cache, 8, shuffle=False)
    twin = _twin(ds)
    got = bridge.run(ds.engine._range_batch([(0, [0, 1])]))
    assert bytes(got[0].sample(1)["data"]) == big(1)
    upload(two, url, **opts)
    path = ds.engine.catalog.shards[0].files.raw_path
    with pytest.raises(
        ObjectChangedError, match=r"another process of this job read it at version \S+, then"
    ):
        twin.prepare_shard(0)
    whole = _held_downloads(sizes)
    downloads = [r for r in proxy.stats.answered if whole("GET", r[0], r[1])]
    assert len(downloads) == 1
    if cloud.name != "gcs":  # fake-gcs-server ignores ifGenerationMatch (the client refuses)
        assert downloads[0][2] == 412  # conditional on the board's version: refused by the server
    assert not os.path.exists(path)
    assert _tmps(cache) == []
    other = dataset(url, opts, cache, 8, shuffle=False)  # another job: its own board
    assert other.prepare_shard(0)
    assert bytes(other[1]["data"]) == flipped(1)
    with pytest.raises(ObjectChangedError, match="another process of this job read it at"):
        twin[1]  # the twin's next read of shard 0 opens that file: not this job's version
    fresh = _twin(ds)  # a process of this job that has read nothing of shard 0 yet
    with pytest.raises(ObjectChangedError, match="another process of this job read it at"):
        fresh[1]  # opening the other job's file: compared with the board's version


def test_a_download_begun_before_the_board_named_a_version_is_refused(
    cloud: Cloud, two_versions: tuple[str, str], make_proxy: MakeProxy, tmp_path: Any
) -> None:
    """One process of a dataset starts downloading shard 0 (nothing on the board yet: the
    download is unconditional), and its GET is held at the proxy; another process reads shard
    0's first samples by ranges (the first version, put on the board); the dataset is
    rewritten; the download goes on and brings the second version. It is refused when it
    ends, before it is published."""
    import threading

    from astream import bridge

    _, two = two_versions
    url, proxy, gate = _behind_gate(cloud, two_versions, make_proxy)
    cache = str(tmp_path / "c")
    ds = dataset(url, cloud.via(proxy), cache, 8, shuffle=False)
    twin = _twin(ds)
    errors: list[BaseException] = []

    def download() -> None:
        try:
            twin.prepare_shard(0)
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=download)
    try:
        t.start()
        # the event: the download's GET reaches the proxy, or the download ends without one
        # (pytest-timeout bounds a hang); no wall-clock deadline, which a loaded machine misses
        while not proxy.stats.held and t.is_alive():
            time.sleep(0.01)
        assert proxy.stats.held, errors  # the download's GET is at the proxy, before any pin
        got = bridge.run(ds.engine._range_batch([(0, [0, 1])]))
        assert bytes(got[0].sample(0)["data"]) == big(0)
        upload(two, url, **cloud.options())
    finally:
        gate.set()
        t.join(60)
    assert len(errors) == 1 and isinstance(errors[0], ObjectChangedError), errors
    assert re.search(
        r"another process of this job read it at version \S+, then \S+", str(errors[0])
    )
    path = ds.engine.catalog.shards[0].files.raw_path
    assert not os.path.exists(path)


def test_a_plain_dataloader_never_mixes_versions_of_a_shard(
    cloud: Cloud, two_versions: tuple[str, str], make_proxy: MakeProxy, tmp_path: Any
) -> None:
    """The whole scenario through a plain torch ``DataLoader`` with 2 workers (no main
    process reading their first batches, so no versions handed to them): each worker reads
    its first batch by ranges, the downloads are held until the dataset is rewritten. The
    epoch ends in an ObjectChangedError, and no shard has samples of both versions among
    the batches handed out before it. (The loader hands out its workers' batches in turn and
    each worker compares the files that appeared before it opens a shard, so this run is
    exact without the board too; the board's own part is shown by the two tests above.)"""
    from torch.utils.data import DataLoader

    _, two = two_versions
    url, proxy, gate = _behind_gate(cloud, two_versions, make_proxy)
    cache = str(tmp_path / "c")
    ds = dataset(url, cloud.via(proxy), cache, 8)
    got: list[tuple[int, bytes]] = []
    it = iter(DataLoader(ds, batch_size=16, num_workers=2))
    try:
        with pytest.raises(ObjectChangedError, match="rewritten while this job reads it"):
            first = next(it)
            got += [(int(i), bytes(d)) for i, d in zip(first["id"], first["data"])]
            upload(two, url, **cloud.options())
            gate.set()
            for b in it:
                got += [(int(i), bytes(d)) for i, d in zip(b["id"], b["data"])]
    finally:
        gate.set()
        del it
    assert got and all(d == big(i) for i, d in got[:16])  # the first batch: by ranges, before
    versions: dict[int, set[bool]] = {}
    for i, d in got:
        assert d in (big(i), flipped(i)), i
        s = int(np.searchsorted(ds.engine.catalog.starts, i, side="right")) - 1
        versions.setdefault(s, set()).add(d == big(i))
    mixed = [s for s, v in versions.items() if len(v) > 1]
    assert not mixed, mixed
    # the workers (forked: they inherit the dataset's finalizer) left the board in place
    assert os.listdir(ds.engine.board.path)


def test_the_board_goes_with_its_dataset(
    two_versions: tuple[str, str], s3_server: Any, s3_bucket: str, tmp_path: Any
) -> None:
    """A dataset's board is on the node while the dataset lives (a copy going away leaves
    it), and is deleted with the dataset."""
    import gc

    from astream import bridge

    one, _ = two_versions
    url = f"{s3_bucket}/rw-{uuid.uuid4().hex[:8]}"
    opts = {"endpoint_url": s3_server.url, "region": "us-east-1", "path_style": True}
    upload(one, url, **opts)
    ds = dataset(url, opts, str(tmp_path / "c"), 8, shuffle=False)
    board = ds.engine.board.path
    assert board.startswith(os.path.join(str(tmp_path / "c"), ".astream", "versions", ""))
    bridge.run(ds.engine._range_batch([(0, [0])]))
    assert len(os.listdir(board)) == 1  # shard 0's version, and no temporary file
    twin = _twin(ds)
    del twin
    gc.collect()
    assert len(os.listdir(board)) == 1
    del ds
    gc.collect()
    assert not os.path.exists(board)
