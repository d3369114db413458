"""The footer index's request budget and its split warm listing.

- Cold, at the S3 proxy: one listing page and exactly one GET per file (its tail, holding the
  footer), no HEAD, and no GET for a published index the listing does not show.
- Warm (a cached index), S3 and GCS: the key space is cut at the cached keys and the ranges are
  listed concurrently; the union is exactly the serial listing whatever was added, removed or
  changed (checked against the serial listing key by key), and a changed file is still refused.
"""

from __future__ import annotations

import asyncio
import io
import os
import uuid
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from astream import Stream, StreamingDataset
from astream.errors import FormatError
from astream.parquet.io_index import _list_all
from astream.parquet.published import INDEX_NAME
from astream.storage import open_store
from astream.storage.sync import upload, upload_key


def _parquet(i: int) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.table({"x": pa.array([i, i + 1], pa.int64())}), buf)
    return buf.getvalue()


def _write(root: str, names: list[str]) -> None:
    os.makedirs(root, exist_ok=True)
    for i, n in enumerate(names):
        os.makedirs(os.path.dirname(os.path.join(root, n)), exist_ok=True)
        with open(os.path.join(root, n), "wb") as f:
            f.write(_parquet(i))


def _on_s3(
    tmp_path: Any, s3_bucket: str, s3_server: Any, make_proxy: Any, names: list[str], **opts: Any
) -> tuple[str, str, Any, Callable[[], StreamingDataset]]:
    """``names`` written as a table (its local root) and uploaded under a fresh prefix (its
    URL), a counting proxy before moto, and a builder of the dataset through that proxy
    (``opts``: more storage options)."""
    root = str(tmp_path / "t")
    _write(root, names)
    url = f"{s3_bucket}/t-{uuid.uuid4().hex[:8]}"
    upload(root, url)
    proxy = make_proxy(s3_server.url)
    local = str(tmp_path / "c")

    def build() -> StreamingDataset:
        return StreamingDataset(
            streams=[Stream(remote=url, local=local, format="parquet")],
            batch_size=2,
            storage_options={"endpoint_url": proxy.url, **opts},
        )

    return url, root, proxy, build


def test_cold_index_is_one_get_per_file_and_no_head(
    tmp_path: Any, s3_bucket: str, s3_server: Any, make_proxy: Any
) -> None:
    names = [f"f{i:02d}.parquet" for i in range(10)]
    _, _, proxy, build = _on_s3(tmp_path, s3_bucket, s3_server, make_proxy, names)
    assert len(build()) == 20
    assert dict(proxy.stats.methods) == {"GET": 11}  # 1 listing page + 10 tails, no HEAD
    tails = [r for r in proxy.stats.ranges if r[0].endswith(".parquet")]
    assert len(tails) == 10 and all(h.startswith("bytes=") for _, h in tails)


def _keys(n: int) -> list[str]:
    return [f"d{i // 7}/p{i:03d}.parquet" for i in range(n)]


@pytest.mark.parametrize("backend", ["s3", "gcs"])
def test_split_listing_equals_serial_listing(
    backend: str, tmp_path: Any, request: pytest.FixtureRequest
) -> None:
    bucket = request.getfixturevalue({"s3": "s3_bucket", "gcs": "gcs_bucket"}[backend])
    url = f"{bucket}/split-{uuid.uuid4().hex[:8]}"
    names = _keys(23)
    store = open_store(url, list_page_size=5)

    async def go() -> None:
        for i, n in enumerate(names):
            await store.put(n, _parquet(i))
        known = list(names)

        async def check() -> None:
            serial = [o async for o in store.list("")]
            split = await _list_all(store, known)
            assert [(o.key, o.size, o.etag) for o in split] == [
                (o.key, o.size, o.etag) for o in serial
            ]

        await check()
        # added before the first key, between cut keys, on a cut key's neighbour, after the
        # last; removed cut keys; a non-Parquet key; a rewritten file
        for n in ("a.parquet", "d0/p002a.parquet", "d1/p008a.parquet", "z/last.parquet",
                  "d2/notes.txt"):  # fmt: skip
            await store.put(n, b"new")
        await check()
        cut = sorted(known)[2]  # the first range's upper bound
        await _delete(store, backend, cut)
        await _delete(store, backend, sorted(known)[5])
        await store.put(sorted(known)[8], _parquet(99))
        await check()
        await store.aclose()

    asyncio.run(go())


async def _delete(store: Any, backend: str, key: str) -> None:
    raw = store.raw
    if backend == "s3":
        client = await raw._sdk()._get_client()  # S3Backend's SDK part (deletes are SDK's)
        await client.delete_object(Bucket=raw.bucket, Key=raw._key(key))
    else:
        await raw._client().delete(raw.bucket, raw._key(key))


def test_split_listing_request_count_and_changed_file_on_warm_start(
    tmp_path: Any, s3_bucket: str, s3_server: Any, make_proxy: Any
) -> None:
    """23 files, pages of 5: cold lists 5 pages serially; warm lists 8 ranges of 3 cached keys,
    one page each; a file rewritten under the cached index is still refused."""
    names = _keys(23)
    url, root, proxy, build = _on_s3(
        tmp_path, s3_bucket, s3_server, make_proxy, names, list_page_size=5
    )
    assert len(build()) == 46
    lists = [p for p, _ in proxy.stats.ranges if not p.endswith(".parquet")]
    assert len(lists) == 5
    proxy.reset_stats()
    assert len(build()) == 46
    assert dict(proxy.stats.methods) == {"GET": 8}  # 8 ranges, one page each, no footer
    with open(os.path.join(root, names[10]), "wb") as f:
        f.write(_parquet(1000))
    upload_key(os.path.join(root, names[10]), url, names[10])
    with pytest.raises(FormatError, match="changed since its Parquet index was built"):
        build()


@pytest.mark.parametrize("backend", ["s3", "http"])
def test_explicit_files_cost_one_get_each_and_no_head(
    backend: str, tmp_path: Any, request: pytest.FixtureRequest, make_proxy: Any
) -> None:
    """``files=[...]``: no listing to give sizes, so an unknown file is read by one
    suffix-range GET that also gives its size and identity (no HEAD); a warm start HEADs each
    file (its identity) and reads no footer."""
    names = [f"f{i}.parquet" for i in range(4)]
    if backend == "s3":
        bucket = request.getfixturevalue("s3_bucket")
        root = str(tmp_path / "t")
        _write(root, names)
        url = f"{bucket}/files-{uuid.uuid4().hex[:8]}"
        upload(root, url)
        proxy = make_proxy(request.getfixturevalue("s3_server").url)
        opts: dict[str, Any] = {"endpoint_url": proxy.url}
        remote = url
    else:
        http_root = request.getfixturevalue("http_root")
        sub = f"files-{uuid.uuid4().hex[:8]}"
        _write(os.path.join(http_root, sub), names)
        proxy = make_proxy(request.getfixturevalue("http_server").url)
        opts = {}
        remote = f"{proxy.url}/{sub}"
    local = str(tmp_path / "c")

    def build() -> StreamingDataset:
        return StreamingDataset(
            streams=[Stream(remote=remote, local=local, format="parquet", files=names)],
            batch_size=2,
            storage_options=opts,
        )

    proxy.reset_stats()
    ds = build()
    # one suffix-range GET per file, no HEAD; plus one look for a published index (no
    # listing tells whether there is one)
    assert dict(proxy.stats.methods) == {"GET": 5}
    tails = sorted(h for p, h in proxy.stats.ranges if p.endswith(".parquet"))
    assert tails == ["bytes=-65536"] * 4
    assert [p for p, _ in proxy.stats.ranges if p.endswith("/" + INDEX_NAME)] != []
    assert sorted(int(s["x"]) for s in ds) == sorted(
        [i for i in range(4)] + [i + 1 for i in range(4)]
    )
    proxy.reset_stats()
    build()
    assert dict(proxy.stats.methods) == {"HEAD": 4}


@pytest.mark.parametrize("backend", ["s3", "gcs", "azure", "local"])
def test_get_tail_gives_the_identity_head_gives(
    backend: str, tmp_path: Any, request: pytest.FixtureRequest
) -> None:
    """A suffix-range read: the last n bytes (all of a shorter object) with the size and
    identity ``head`` reports (Azure: by a HEAD and a GET)."""
    if backend == "local":
        url = str(tmp_path / "r")
        os.makedirs(url)
    else:
        bucket = request.getfixturevalue(
            {"s3": "s3_bucket", "gcs": "gcs_bucket", "azure": "azure_container"}[backend]
        )
        url = f"{bucket}/tail-{uuid.uuid4().hex[:8]}"
    big = bytes(range(256)) * 300  # 76,800 bytes
    store = open_store(url)

    async def go() -> None:
        await store.put("big.bin", big)
        await store.put("small.bin", b"0123456789")
        for key, data in (("big.bin", big), ("small.bin", b"0123456789")):
            info, tail = await store.get_tail(key, 1000)  # type: ignore[attr-defined]
            head = await store.head(key)
            assert (info.key, info.size, info.etag) == (key, len(data), head.etag)
            assert tail == data[-1000:]
        await store.aclose()

    asyncio.run(go())


def test_concurrent_first_requests_share_one_s3_client(
    s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A split listing's ranges are a fresh store's first requests, all at once: they make one
    SDK client, not one each (every extra one leaked its connection pool)."""
    import astream.storage.s3sdk as s3mod

    made: list[int] = []
    real = s3mod._new_session

    def counting(loader: Any) -> Any:
        made.append(1)
        return real(loader)

    monkeypatch.setattr(s3mod, "_new_session", counting)
    url = f"{s3_bucket}/one-{uuid.uuid4().hex[:8]}"
    names = _keys(12)

    async def go() -> None:
        w = open_store(url)
        for n in names:
            await w.put(n, b"x")
        await w.aclose()
        made.clear()
        store = open_store(url, list_page_size=4, direct=False)  # 6 ranges of 2 keys, SDK
        got = await _list_all(store, names)
        await store.aclose()
        assert [o.key for o in got] == names
        assert made == [1]

    asyncio.run(go())


def test_cold_index_reads_footers_while_it_lists(
    tmp_path: Any, s3_bucket: str, s3_server: Any, make_proxy: Any
) -> None:
    """23 files, pages of 5: the first footer GET goes out before the last page is asked
    for (the footers of a page are read while the next pages are listed), and the budget is
    still the 5 pages plus one GET per file."""
    _, _, proxy, build = _on_s3(
        tmp_path, s3_bucket, s3_server, make_proxy, _keys(23), list_page_size=5
    )
    ds = build()
    order = [p.endswith(".parquet") for p, _ in proxy.stats.ranges]  # building the dataset
    assert sorted(int(s["x"]) for s in ds) == sorted([*range(23), *range(1, 24)])
    assert order.count(False) == 5 and order.count(True) == 23
    last_page = len(order) - 1 - order[::-1].index(False)
    assert order.index(True) < last_page


@pytest.mark.parametrize("published", [True, False])
def test_keys_listed_before_a_published_index_wait_for_it(
    published: bool, tmp_path: Any, s3_bucket: str, s3_server: Any, make_proxy: Any
) -> None:
    """Upper-case keys sort before ``_astream_parquet_index.bin``, lower-case ones after it:
    pages of 3 list the six ``P`` keys before the index is (or would be) listed. With the
    index published no footer is read at all; without it, each file's footer once."""
    names = [f"P{i}.parquet" for i in range(6)] + [f"q{i}.parquet" for i in range(4)]
    url, _, proxy, build = _on_s3(
        tmp_path, s3_bucket, s3_server, make_proxy, names, list_page_size=3
    )
    if published:
        from astream.cli import main as cli

        assert cli(["index", url]) == 0
    ds = build()
    built = [p for p, _ in proxy.stats.ranges]  # the GETs of building the dataset
    assert sorted(int(s["x"]) for s in ds) == sorted([*range(10), *range(1, 11)])
    footers = sorted(p.rsplit("/", 1)[-1] for p in built if p.endswith(".parquet"))
    if published:  # the 4 pages and the index itself, no footer
        assert footers == []
        assert len(built) == 5 and built[-1].endswith("/" + INDEX_NAME)
    else:  # the 4 pages and each footer once
        assert footers == sorted(names)
        assert len(built) == 4 + len(names)


def test_the_collector_is_off_while_footers_are_read_and_back_after(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gc

    from astream.parquet import io_footers

    root = str(tmp_path / "t")
    _write(root, [f"f{i}.parquet" for i in range(4)])
    seen: list[bool] = []
    real = io_footers.read_footer

    async def recording(*args: Any, **kw: Any) -> Any:
        seen.append(gc.isenabled())
        return await real(*args, **kw)

    monkeypatch.setattr(io_footers, "read_footer", recording)
    assert gc.isenabled()
    ds = StreamingDataset(remote=root, local=str(tmp_path / "c"), format="parquet", batch_size=2)
    assert len(ds) == 8
    assert seen == [False] * 4 and gc.isenabled()
    with open(os.path.join(root, "f9.parquet"), "wb") as f:
        f.write(b"PAR1 not a footer PAR1")
    with pytest.raises(FormatError, match=r"f9\.parquet"):
        StreamingDataset(remote=root, local=str(tmp_path / "c2"), format="parquet", batch_size=2)
    assert gc.isenabled()  # a build that failed gives it back too
    with io_footers.gc_paused():
        with io_footers.gc_paused():  # builds overlapping: back when the last one ends
            pass
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()  # a process that runs without it keeps it off
    try:
        with io_footers.gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
