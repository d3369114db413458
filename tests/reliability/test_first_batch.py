"""The start of an iteration reads its first samples by ranged GETs while whole shards download
(``range_first_batches``, ``Engine._range_batch``).

Every run here goes through a FaultProxy in front of a real emulator (moto, fake-gcs-server,
Azurite, a static HTTP server), so the ranged GETs are counted where they arrive: a whole-shard
download asks for ``bytes=0-<size - 1>``, every other Range of a shard is a range read. Each
test compares a run with the fast path against one without it (``range_first_batches=0``) on
a cold cache of its own: same samples, same order, same bytes.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from astream import MDSWriter, StreamingDataLoader, StreamingDataset
from astream.core.shard import header_size
from astream.errors import ConfigError
from astream.storage.sync import upload
from astream.testing import FaultProxy

from .conftest import Cloud, MakeProxy, shard_names

N = 240
SIZE_LIMIT = 150_000  # ~7 samples of ~20 KB per shard, ~34 shards


def big(i: int) -> bytes:
    """Sample ``i``'s bytes: 0.8-40 KB (mean ~20 KB, so batch output reads them with preadv)."""
    seed = hashlib.sha256(b"fb" + i.to_bytes(8, "little")).digest()
    n = 800 + int.from_bytes(seed[:2], "little") % 39_200
    return (seed * (n // 32 + 1))[:n]


def write_big(
    path: str,
    hashes: list[str] | None = None,
    data: Callable[[int], bytes] = big,
    size_limit: int = SIZE_LIMIT,
) -> str:
    cols = {"id": "int", "data": "bytes"}
    with MDSWriter(out=path, columns=cols, size_limit=size_limit, hashes=hashes) as w:
        for i in range(N):
            w.write({"id": i, "data": data(i)})
    return path


@pytest.fixture(scope="module")
def big_src(tmp_path_factory: pytest.TempPathFactory) -> str:
    return write_big(str(tmp_path_factory.mktemp("fb") / "big"))


def shard_sizes(src: str) -> dict[str, int]:
    return {n: os.path.getsize(os.path.join(src, n)) for n in shard_names(src)}


def range_gets(proxy: FaultProxy, sizes: dict[str, int]) -> list[tuple[str, str]]:
    """(shard file, Range) of every GET of a shard that was not a whole-shard download."""
    out = []
    for path, rng in proxy.stats.ranges:
        name = path.rsplit("/", 1)[-1]
        if name in sizes and rng not in ("", f"bytes=0-{sizes[name] - 1}"):
            out.append((name, rng))
    return out


def shard_gets(proxy: FaultProxy, sizes: dict[str, int]) -> int:
    """GETs of shard files (Azure's SDK sends its range as ``x-ms-range``, which the proxy
    does not record: counting GETs per shard works for every cloud)."""
    return sum(path.rsplit("/", 1)[-1] in sizes for path, _ in proxy.stats.ranges)


def dataset(remote: str, opts: dict[str, Any], local: str, first: int, **kw: Any) -> Any:
    kw.setdefault("shuffle", True)
    ds = StreamingDataset(
        remote=remote,
        local=local,
        storage_options=opts,
        batch_size=16,
        shuffle_seed=11,
        range_first_batches=first,
        **kw,
    )
    ds.engine.range_min_bytes = 0  # the shards here are small: read them by range anyway
    ds.engine.range_share = 1.0  # and a batch here holds much of each shard it reads
    return ds


def pairs(samples: list[dict[str, Any]]) -> list[tuple[int, bytes]]:
    return [(int(s["id"]), bytes(s["data"])) for s in samples]


def check_cache(local: str, sizes: dict[str, int]) -> None:
    """Only complete shard files in the cache: no partial file, no range bytes."""
    for name in os.listdir(local):
        if name.startswith("shard."):
            assert name in sizes and "tmp" not in name, name
            assert os.path.getsize(os.path.join(local, name)) == sizes[name], name


def cold_pair(
    remote: str, opts: dict[str, Any], tmp: Any, proxy: FaultProxy, sizes: dict[str, int]
) -> tuple[list[tuple[int, bytes]], list[tuple[int, bytes]], int]:
    """(samples without the fast path, samples with it, range GETs with it), each cold: the
    GETs of shards past one per shard (each shard is downloaded once either way)."""
    proxy.reset_stats()
    off = pairs(list(dataset(remote, opts, str(tmp / "off"), 0)))
    assert shard_gets(proxy, sizes) == len(sizes)
    proxy.reset_stats()
    ds = dataset(remote, opts, str(tmp / "on"), 8)
    on = pairs(list(ds))
    assert ds.engine._parts().range_samples > 0
    check_cache(str(tmp / "on"), sizes)
    extra = shard_gets(proxy, sizes) - len(sizes)
    proxy.reset_stats()  # warm: every shard is in the cache, nothing is read by range
    assert sorted(pairs(list(ds))) == sorted(on) and shard_gets(proxy, sizes) == 0
    return off, on, extra


def test_clouds_same_samples_by_ranges(
    cloud: Cloud, big_src: str, make_proxy: MakeProxy, tmp_path: Any
) -> None:
    url = cloud.upload(big_src, "fb")
    proxy = make_proxy(cloud.server.url)
    sizes = shard_sizes(big_src)
    off, on, ranged = cold_pair(url, cloud.via(proxy), tmp_path, proxy, sizes)
    assert on == off
    assert sorted(i for i, _ in on) == list(range(N))
    assert all(d == big(i) for i, d in on)
    assert ranged > 0


def test_http_same_samples_by_ranges(
    http_server: Any, http_root: str, make_proxy: MakeProxy, tmp_path: Any
) -> None:
    name = f"fb-{uuid.uuid4().hex[:8]}"
    src = write_big(os.path.join(http_root, name))
    proxy = make_proxy(http_server.url)
    sizes = shard_sizes(src)
    off, on, ranged = cold_pair(f"{proxy.url}/{name}", {}, tmp_path, proxy, sizes)
    assert on == off and all(d == big(i) for i, d in on)
    assert ranged > 0


@pytest.fixture(scope="module")
def s3_big(s3_server: Any, s3_bucket: str, big_src: str) -> str:
    url = f"{s3_bucket}/fb-{uuid.uuid4().hex[:8]}"
    upload(big_src, url)
    return url


def s3_opts(proxy: FaultProxy) -> dict[str, Any]:
    return {"endpoint_url": proxy.url, "region": "us-east-1", "path_style": True}


def columns_iter(batches: Any) -> Any:
    for b in batches:
        data, offs = np.asarray(b["data"]), np.asarray(b["data_offsets"])
        vals = [data[offs[k] : offs[k + 1]].tobytes() for k in range(len(offs) - 1)]
        yield np.asarray(b["id"]).tolist(), vals


def columns(batches: Any) -> list[tuple[list[int], list[bytes]]]:
    return list(columns_iter(batches))


def test_batch_output_by_ranges(
    s3_server: Any, s3_big: str, big_src: str, make_proxy: MakeProxy, tmp_path: Any
) -> None:
    proxy = make_proxy(s3_server.url)
    sizes = shard_sizes(big_src)
    opts = s3_opts(proxy)
    off = columns(dataset(s3_big, opts, str(tmp_path / "off"), 0).batches(ragged="offsets"))
    proxy.reset_stats()
    ds = dataset(s3_big, opts, str(tmp_path / "on"), 8)
    on = columns(ds.batches(ragged="offsets"))  # values of ~20 KB: read with preadv
    assert on == off
    assert [i for ids, _ in on for i in ids] == [i for ids, _ in off for i in ids]
    for ids, vals in on:
        assert vals == [big(i) for i in ids]
    assert range_gets(proxy, sizes) and ds.engine._parts().range_samples > 0
    check_cache(str(tmp_path / "on"), sizes)
    assert memfds() == 0  # the range shards' in-memory files are closed after their batch


def memfds() -> int:
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += "astream-range" in os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass
    return n


@pytest.mark.parametrize("fmt", [pytest.param(None, marks=pytest.mark.slow), "numpy"])
def test_loader_two_workers_by_ranges(
    s3_server: Any,
    s3_big: str,
    big_src: str,
    make_proxy: MakeProxy,
    tmp_path: Any,
    fmt: str | None,
) -> None:
    proxy = make_proxy(s3_server.url)
    sizes = shard_sizes(big_src)
    opts = s3_opts(proxy)

    def run(first: int, tag: str) -> tuple[list[list[int]], Any]:
        ds = dataset(s3_big, opts, str(tmp_path / tag), first)
        kw: dict[str, Any] = {"batch_format": fmt, "ragged": "offsets"} if fmt else {}
        ld = StreamingDataLoader(ds, batch_size=16, num_workers=2, **kw)
        got = []
        for b in ld:
            ids = [int(x) for x in b["id"]]
            if fmt:
                data, offs = b["data"], b["data_offsets"]
                vals = [data[offs[k] : offs[k + 1]].tobytes() for k in range(len(ids))]
            else:
                vals = [bytes(x) for x in b["data"]]
            assert vals == [big(i) for i in ids]
            got.append(ids)
        return got, ld.state_dict()

    off, off_state = run(0, "off")
    assert range_gets(proxy, sizes) == []
    proxy.reset_stats()
    on, on_state = run(8, "on")
    assert on == off and on_state == off_state
    assert sorted(i for ids in on for i in ids) == list(range(N))
    assert range_gets(proxy, sizes)
    check_cache(str(tmp_path / "on"), sizes)


def test_resume_reads_by_ranges_again(
    s3_server: Any, s3_big: str, big_src: str, make_proxy: MakeProxy, tmp_path: Any
) -> None:
    proxy = make_proxy(s3_server.url)
    sizes = shard_sizes(big_src)
    opts = s3_opts(proxy)
    full = pairs(list(dataset(s3_big, opts, str(tmp_path / "full"), 0)))
    ds = dataset(s3_big, opts, str(tmp_path / "a"), 8)
    it = iter(ds)
    head = [next(it) for _ in range(40)]
    state = ds.state_dict()
    del it
    proxy.reset_stats()
    ds2 = dataset(s3_big, opts, str(tmp_path / "b"), 8)
    ds2.load_state_dict(state)
    rest = pairs(list(ds2))
    assert pairs(head) + rest == full
    assert range_gets(proxy, sizes) and ds2.engine._parts().range_samples > 0


def test_hash_validation_skips_ranges(
    s3_server: Any, s3_bucket: str, make_proxy: MakeProxy, tmp_path: Any
) -> None:
    """A range cannot be checked against a whole-shard hash: a validating stream waits for its
    shards, and reads none by range."""
    src = write_big(str(tmp_path / "src"), hashes=["xxh64"])
    url = f"{s3_bucket}/fbh-{uuid.uuid4().hex[:8]}"
    upload(src, url)
    proxy = make_proxy(s3_server.url)
    sizes = shard_sizes(src)
    ds = dataset(url, s3_opts(proxy), str(tmp_path / "c"), 8, validate_hash="xxh64")
    got = pairs(list(ds))
    assert sorted(i for i, _ in got) == list(range(N)) and all(d == big(i) for i, d in got)
    assert range_gets(proxy, sizes) == [] and ds.engine._parts().range_samples == 0
    proxy.reset_stats()  # the same data without validation does read ranges (the control)
    it = iter(dataset(url, s3_opts(proxy), str(tmp_path / "d"), 8))
    assert pairs([next(it) for _ in range(16)]) == got[:16]
    assert range_gets(proxy, sizes)


@pytest.mark.parametrize("workers", [0, 2])
def test_dense_batches_read_whole_shards(
    s3_server: Any, s3_big: str, big_src: str, make_proxy: MakeProxy, tmp_path: Any, workers: int
) -> None:
    """Unshuffled, a batch is a run of consecutive samples: its ranges would be most of its
    shards, which their downloads then read again. At the default ``range_share`` such a batch
    waits for the downloads instead, in the process that iterates and in the loader's main
    process alike: every shard fetched whole once, and ranges only where a batch wants a few
    samples of a shard still downloading while its other shards are complete (timing: one
    such batch in some runs under load), under a quarter of the data in all. With the share
    raised (the control), the same iteration reads its first batches by ranges: over four
    times those bytes (12-16% of the data here at 0 workers, 40-50% at 2; the later first
    batches find their shards downloaded)."""
    proxy = make_proxy(s3_server.url)
    sizes = shard_sizes(big_src)

    def run(share: float, tag: str) -> list[int]:
        ds = dataset(s3_big, s3_opts(proxy), str(tmp_path / tag), 8, shuffle=False)
        ds.engine.range_share = share
        if workers:
            ld = StreamingDataLoader(ds, batch_size=16, num_workers=workers)
            return [int(x) for b in ld for x in b["id"]]
        return [int(s["id"]) for s in ds]

    def ranged_bytes() -> int:
        total = 0
        for _, rng in range_gets(proxy, sizes):
            a, b = rng.split("=")[1].split("-")
            total += int(b) + 1 - int(a)
        return total

    data = sum(sizes.values())
    proxy.reset_stats()
    got = run(0.25, "dense")
    assert got == list(range(N))
    ranged = ranged_bytes()
    assert ranged <= data // 4, range_gets(proxy, sizes)
    assert shard_gets(proxy, sizes) - len(range_gets(proxy, sizes)) == len(sizes)  # whole, once
    assert sum(proxy.stats.bytes[p] for p in proxy.stats.bytes if "shard." in p) == data + ranged
    check_cache(str(tmp_path / "dense"), sizes)
    proxy.reset_stats()
    assert run(1.0, "control") == got
    assert ranged * 4 <= ranged_bytes()


def cache_bytes(local: str) -> int:
    """Bytes of shard files in ``local``, downloads in progress included."""
    total = 0
    for name in os.listdir(local):
        if name.startswith("shard."):
            try:
                total += os.path.getsize(os.path.join(local, name))
            except FileNotFoundError:
                pass  # a download renamed or an eviction since the listing
    return total


def test_cache_limit_kept(
    s3_server: Any, s3_big: str, big_src: str, make_proxy: MakeProxy, tmp_path: Any
) -> None:
    proxy = make_proxy(s3_server.url)
    sizes = shard_sizes(big_src)
    limit = 8 * max(sizes.values())  # of ~34 shards: evictions all along
    local = str(tmp_path / "lim")
    ds = dataset(s3_big, s3_opts(proxy), local, 8, cache_limit=limit, shuffle_block_size=32)
    used = []
    got = []
    for k, x in enumerate(ds):
        got.append(x)
        if k % 8 == 0:
            used.append(cache_bytes(local))
    assert sorted(int(x["id"]) for x in got) == list(range(N))
    assert all(bytes(x["data"]) == big(int(x["id"])) for x in got)
    assert max(used) <= limit
    assert range_gets(proxy, sizes)
    check_cache(local, sizes)


def test_coalesced_ranges(
    s3_server: Any, s3_big: str, big_src: str, make_proxy: MakeProxy, tmp_path: Any
) -> None:
    """Unshuffled, the first batch's 16 samples sit side by side in 2-4 shards: one header GET
    and one data GET per shard, the data GET covering exactly the wanted samples."""
    proxy = make_proxy(s3_server.url)
    sizes = shard_sizes(big_src)
    ds = dataset(s3_big, s3_opts(proxy), str(tmp_path / "co"), 1, shuffle=False)
    first = pairs([x for _, x in zip(range(48), ds)])  # batches 2-3 wait for whole shards
    assert [i for i, _ in first] == list(range(48))
    gets = range_gets(proxy, sizes)
    # the shards were downloaded whole too (how many GETs run while the first batch reads
    # its ranges: test_held_downloads_send_half_their_gets_until_the_ranges_are_read)
    assert shard_gets(proxy, sizes) > len(gets)
    shards = sorted({ds.catalog.shards[ds.catalog.locate_one(i)[0]].files.raw_path
                     .rsplit("/", 1)[-1] for i in range(16)})  # fmt: skip
    assert sorted({name for name, _ in gets}) == shards
    for name in shards:
        s = next(k for k, sh in enumerate(ds.catalog.shards) if sh.raw_key.endswith(name))
        n = ds.catalog.entries[s].samples
        mine = sorted(r for nm, r in gets if nm == name)
        head = f"bytes=0-{header_size(n) - 1}"
        assert head in mine and len(mine) == 2, mine
        (data,) = [r for r in mine if r != head]
        a, b = (int(x) for x in re.fullmatch(r"bytes=(\d+)-(\d+)", data).groups())  # type: ignore[union-attr]
        want = [big(i) for i in range(16) if ds.catalog.locate_one(i)[0] == s]
        assert b + 1 - a == sum(len(w) + 4 + 8 for w in want)  # the samples, no byte more


def test_held_downloads_send_half_their_gets_until_the_ranges_are_read(
    s3_server: Any, s3_big: str, big_src: str, make_proxy: MakeProxy, tmp_path: Any
) -> None:
    """While the first batch reads its ranges, the prefetcher runs at most half its GETs:
    with the first batch's data GETs (and every whole-shard GET) held at the server, exactly
    16 of the 32 whole-shard GETs (a process without workers) arrive, the earliest shards in
    the order the plan uses them; let go, the epoch's first 48 samples are exact."""
    proxy = make_proxy(s3_server.url)
    sizes = shard_sizes(big_src)
    ds = dataset(s3_big, s3_opts(proxy), str(tmp_path / "held"), 1, shuffle=False)
    assert ds.engine.gets() == 32 and len(sizes) > 16
    heads = {
        ds.catalog.shards[s].raw_key.rsplit("/", 1)[-1]: header_size(e.samples)
        for s, e in enumerate(ds.catalog.entries)
    }

    def held(method: str, path: str, rng: str) -> bool:  # every shard GET but a header's
        name = path.rsplit("/", 1)[-1]
        return method == "GET" and name in sizes and rng != f"bytes=0-{heads[name] - 1}"

    gate = proxy.hold(held)
    got: list[Any] = []
    reader = threading.Thread(target=lambda: got.extend(x for _, x in zip(range(48), ds)))
    reader.start()
    try:

        def wholes() -> list[str]:
            return [p.rsplit("/", 1)[-1] for p, r in list(proxy.stats.held)
                    if r == f"bytes=0-{sizes[p.rsplit('/', 1)[-1]] - 1}"]  # fmt: skip

        deadline = time.monotonic() + 20
        while len(wholes()) < 16 and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.5)  # time for a 17th to arrive, were it sent
        assert sorted(wholes()) == sorted(_first_uses(ds)[:16])
        # the first batch's data GETs wait too: the iteration is still in its first batch
        assert len(proxy.stats.held) > len(wholes()) and not got
    finally:
        gate.set()
        reader.join(60)
    assert pairs(got) == [(i, big(i)) for i in range(48)]


def _first_uses(ds: Any) -> list[str]:
    """The dataset's shard files in the order its iteration first reads them."""
    return list(dict.fromkeys(
        ds.catalog.shards[ds.catalog.locate_one(i)[0]].raw_key.rsplit("/", 1)[-1]
        for i in range(len(ds))
    ))  # fmt: skip


def test_a_process_without_workers_runs_32_downloads_at_once(
    s3_server: Any, s3_bucket: str, make_proxy: MakeProxy, tmp_path: Any
) -> None:
    """A rank read by its main process alone downloads 32 shards at once: with every shard
    GET held at the server, exactly the 32 shards the plan uses first arrive, each as one
    whole-shard GET (the prefetcher is not held: no first batch by ranges here); let go, the
    epoch is exact."""
    src = write_big(str(tmp_path / "src"), size_limit=90_000)
    url = f"{s3_bucket}/w0-{uuid.uuid4().hex[:8]}"
    upload(src, url)
    proxy = make_proxy(s3_server.url)
    sizes = shard_sizes(src)
    assert len(sizes) > 40
    ds = dataset(url, s3_opts(proxy), str(tmp_path / "w0"), 0, shuffle=False)
    gate = proxy.hold(lambda method, path, rng: path.rsplit("/", 1)[-1] in sizes)
    got: list[Any] = []
    reader = threading.Thread(target=lambda: got.extend(ds))
    reader.start()
    try:
        deadline = time.monotonic() + 20
        while len(proxy.stats.held) < 32 and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.5)  # time for a 33rd to arrive, were it sent
        held = list(proxy.stats.held)
        assert all(r == f"bytes=0-{sizes[p.rsplit('/', 1)[-1]] - 1}" for p, r in held), held
        assert sorted(p.rsplit("/", 1)[-1] for p, _ in held) == sorted(_first_uses(ds)[:32])
    finally:
        gate.set()
        reader.join(60)
    assert pairs(got) == [(i, big(i)) for i in range(N)]


class _GetsProbe(torch.utils.data.Dataset[int]):
    """What ``Iteration.gets`` says in each DataLoader worker."""

    def __init__(self, ds: Any) -> None:
        self.ds = ds

    def __len__(self) -> int:
        return 6

    def __getitem__(self, i: int) -> int:
        return int(self.ds.engine.gets())


@pytest.mark.parametrize(("workers", "want"), [(0, 32), (1, 32), (2, 16), (4, 16)])
def test_a_rank_shares_32_gets_over_its_workers_at_least_16_each(
    big_src: str, tmp_path: Any, workers: int, want: int
) -> None:
    ds = StreamingDataset(local=big_src, batch_size=16)
    loader = torch.utils.data.DataLoader(_GetsProbe(ds), batch_size=None, num_workers=workers)
    assert list(loader) == [want] * 6
    ds.engine.concurrency = 5  # set: every process runs that many
    loader = torch.utils.data.DataLoader(_GetsProbe(ds), batch_size=None, num_workers=workers)
    assert list(loader) == [5] * 6


def test_fault_in_range_read_retried(
    s3_server: Any, s3_big: str, big_src: str, make_proxy: MakeProxy, tmp_path: Any
) -> None:
    proxy = make_proxy(s3_server.url)
    sizes = shard_sizes(big_src)
    opts = s3_opts(proxy)
    ref = dataset(s3_big, opts, str(tmp_path / "ref"), 0)
    full = pairs(list(ref))
    s, _ = ref.catalog.locate_one(full[0][0])
    name = ref.catalog.shards[s].raw_key.rsplit("/", 1)[-1]
    proxy.reset_stats()
    # the first shard's header range is answered 503, then cut in the middle, then retried
    # (its whole download may start meanwhile: the prefetcher runs half its GETs while held)
    head = f"bytes=0-{header_size(ref.catalog.entries[s].samples) - 1}"
    proxy.plan("503", "truncate", path=name, rng=head)
    ds = dataset(s3_big, opts, str(tmp_path / "f"), 8)
    assert pairs(list(ds)) == full
    assert proxy.stats.faults == {"503": 1, "truncate": 1}
    assert [(p.rsplit("/", 1)[-1], r) for p, r, _f in proxy.stats.faulted] == [(name, head)] * 2
    mine = [r for p, r in proxy.stats.ranges if p.endswith(name)]
    assert mine.count(head) == 2 and len(mine) > 3  # and a resumed tail, the data, the shard
    assert ds.engine.stats.retries == 2
    check_cache(str(tmp_path / "f"), sizes)


@pytest.mark.parametrize("bad", [-1, True, 1.5, "8"])
def test_bad_knob_refused(big_src: str, bad: Any) -> None:
    with pytest.raises(ConfigError, match="range_first_batches"):
        StreamingDataset(local=big_src, range_first_batches=bad)


def test_local_data_untouched(big_src: str) -> None:
    ds = StreamingDataset(local=big_src, batch_size=16, shuffle=True, shuffle_seed=11)
    ds.engine.range_min_bytes = 0
    got = pairs(list(ds))
    assert sorted(i for i, _ in got) == list(range(N))
    assert ds.engine._parts().range_samples == 0


@pytest.mark.parametrize("io", ["thread", pytest.param("loop", marks=pytest.mark.slow)])
def test_aiter_by_ranges(
    s3_server: Any, s3_big: str, big_src: str, make_proxy: MakeProxy, tmp_path: Any, io: str
) -> None:
    import asyncio

    proxy = make_proxy(s3_server.url)
    sizes = shard_sizes(big_src)
    opts = s3_opts(proxy)
    full = pairs(list(dataset(s3_big, opts, str(tmp_path / "full"), 0)))
    proxy.reset_stats()
    ds = dataset(s3_big, opts, str(tmp_path / "a"), 8)

    async def go() -> list[dict[str, Any]]:
        try:
            return [x async for x in ds.aiter(io=io)]
        finally:
            await ds.engine.aclose()

    assert pairs(asyncio.run(go())) == full
    assert range_gets(proxy, sizes) and ds.engine._parts().range_samples > 0
    check_cache(str(tmp_path / "a"), sizes)
