"""A shard download writes each ranged GET's chunks into its temporary file as they arrive.

Real servers (moto, fake-gcs-server, Azurite, the aiohttp static server) behind the fault proxy,
and the real :class:`~astream.runtime.fetch.ShardFetcher`: the bytes land exact, one GET per
part, no whole part is ever held in memory (the Python heap's peak stays far under a part), and
a body cut in the middle resumes at the next byte into the same offset, fetching no byte twice.
"""

from __future__ import annotations

import asyncio
import os
import random
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest

from astream.errors import FormatError
from astream.runtime.cache import CacheSpace, ShardFiles
from astream.runtime.fetch import RemoteShard, ShardFetcher, Slots, Streams
from astream.runtime.stats import Stats
from astream.runtime.versions import XATTR
from astream.testing import FaultProxy

from .conftest import Target
from .test_faults import gets, seed

PART = 8 << 20
BLOB = random.Random(11).randbytes(2 * PART + 12345)  # three parts, the last one short


def _shard(root: str, url: str, key: str, size: int) -> RemoteShard:
    files = ShardFiles(root=root, raw="shard.00000.mds", raw_size=size)
    return RemoteShard(
        files=files,
        remote=url,
        raw_key=key,
        zip_key=None,
        compression=None,
        raw_hashes={},
        zip_hashes={},
    )


def _fetcher(root: str, store: Any) -> ShardFetcher:
    return ShardFetcher(CacheSpace([root], None), Stats(), lambda _url: store, part_size=PART)


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


async def test_parts_stream_into_the_file(
    remote_target: Target, make_proxy: Callable[..., FaultProxy], tmp_path: Any
) -> None:
    await seed(remote_target, "big.bin", BLOB)
    proxy = make_proxy(remote_target.upstream)
    store = remote_target.open(proxy=proxy)
    root = str(tmp_path / "cache")
    shard = _shard(root, store.url, "big.bin", len(BLOB))
    fetcher = _fetcher(root, store)
    try:
        tracemalloc.start()
        try:
            assert await fetcher.download(shard)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    finally:
        await store.aclose()
    assert _read(shard.files.raw_path) == BLOB
    assert fetcher.stats.range_requests == 3
    if remote_target.name != "azure":  # Azure's SDK splits a read into blocks of its own
        assert gets(proxy) == 3
    assert proxy.stats.total_bytes == len(BLOB)
    # chunks go to the file as they come: the heap never holds a part (8 MiB), let alone all
    # of them; what is left is the client's socket buffers and one chunk per GET in flight:
    # 1.2-3.9 MB here over the backends and runs (it depends on how far each socket reads
    # ahead of the writes), against 16-24 MB when parts are joined before they are written.
    # (Azure's SDK downloads into buffers of its own, up to ~14 MiB here: not bounded by us.)
    if remote_target.name != "azure":
        assert peak < PART, peak
    assert not [n for n in os.listdir(root) if ".tmp-" in n]


async def test_cut_body_resumes_at_its_offset(
    remote_target: Target, make_proxy: Callable[..., FaultProxy], tmp_path: Any
) -> None:
    await seed(remote_target, "cut.bin", BLOB)
    proxy = make_proxy(remote_target.upstream)
    store = remote_target.open(proxy=proxy)
    root = str(tmp_path / "cache")
    shard = _shard(root, store.url, "cut.bin", len(BLOB))
    fetcher = ShardFetcher(CacheSpace([root], None), Stats(), lambda _u: store, part_size=PART)
    fetcher.part_concurrency = 1  # parts in order: the cut lands in the first one
    try:
        proxy.plan("truncate", path="cut.bin")
        assert await fetcher.download(shard)
    finally:
        await store.aclose()
    assert proxy.stats.faults == {"truncate": 1}
    assert _read(shard.files.raw_path) == BLOB
    if remote_target.name != "azure":  # Azure's SDK re-reads the whole cut block
        # half of the first part, then exactly its missing half: no byte fetched twice
        assert gets(proxy) == 4
        assert proxy.stats.total_bytes == len(BLOB)


class _Overfull:
    """A store whose server ignores the end of the range (sends one byte too many)."""

    url = "s3://bucket/p"

    def url_for(self, key: str) -> str:
        return f"{self.url}/{key}"

    async def stream_range(
        self,
        key: str,
        start: int,
        end: int,
        sink: Callable[[bytes], object],
        *,
        etag: str | None = None,
        seen: list[str] | None = None,
    ) -> int:
        sink(BLOB[start : end + 1])
        return end + 1 - start


async def test_more_than_the_range_is_refused(tmp_path: Any) -> None:
    root = str(tmp_path / "cache")
    store = _Overfull()
    shard = _shard(root, store.url, "x.bin", 1000)
    with pytest.raises(FormatError, match=r"s3://bucket/p/x.bin: the server sent more than"):
        await _fetcher(root, store).download(shard)
    assert not os.path.exists(shard.files.raw_path)
    assert not [n for n in os.listdir(root) if ".tmp-" in n]


class _RewrittenAfterFirstPart:
    """The real store, and a writer that rewrites the object (same size, other bytes) on the
    real server as soon as the first part is in: a job rewriting a dataset in place while a
    reader downloads one of its shards."""

    def __init__(self, store: Any, target: Target, key: str, new: bytes) -> None:
        self.store, self.target, self.key, self.new = store, target, key, new
        self.url = store.url
        self.parts = 0

    def url_for(self, key: str) -> str:
        return str(self.store.url_for(key))

    async def stream_range(self, key: str, start: int, end: int, sink: Any, **kw: Any) -> int:
        got = int(await self.store.stream_range(key, start, end, sink, **kw))
        self.parts += 1
        if self.parts == 1:
            await seed(self.target, self.key, self.new)
        return got


async def test_object_rewritten_between_parts_is_refused(
    remote_target: Target, make_proxy: Callable[..., FaultProxy], tmp_path: Any
) -> None:
    """An MDS shard has no indexed identity, so its parts are read unconditionally; each
    answer names the object's version, and a download whose parts name two versions is an
    ``ObjectChangedError`` naming the object, with no file published -- never a file of the
    first part of one version and the rest of another."""
    from astream.errors import ObjectChangedError

    await seed(remote_target, "rw.bin", BLOB)
    new = bytes(b ^ 0x5A for b in BLOB)
    proxy = make_proxy(remote_target.upstream)
    real = remote_target.open(proxy=proxy)
    store = _RewrittenAfterFirstPart(real, remote_target, "rw.bin", new)
    root = str(tmp_path / "cache")
    shard = _shard(root, real.url, "rw.bin", len(BLOB))
    fetcher = ShardFetcher(CacheSpace([root], None), Stats(), lambda _u: store, part_size=PART)
    fetcher.part_concurrency = 1  # parts in order: the rewrite lands between the first two
    try:
        with pytest.raises(ObjectChangedError, match="rewritten while it downloaded") as ei:
            await fetcher.download(shard)
    finally:
        await real.aclose()
    assert store.parts == 3  # every part was read: the versions differ, not a failed GET
    assert ei.value.url is not None and ei.value.url.endswith("/rw.bin")
    assert not os.path.exists(shard.files.raw_path)
    assert not [n for n in os.listdir(root) if ".tmp-" in n]
    # the same download with nothing rewritten (the object now stays the new version)
    real = remote_target.open(proxy=proxy)
    fresh = ShardFetcher(CacheSpace([root], None), Stats(), lambda _u: real, part_size=PART)
    try:
        assert await fresh.download(shard)
    finally:
        await real.aclose()
    assert _read(shard.files.raw_path) == new


SMALL = random.Random(12).randbytes(200_000)


async def test_a_read_fixes_the_version_the_process_reads(
    remote_target: Target, make_proxy: Callable[..., FaultProxy], tmp_path: Any
) -> None:
    """The first ranged read of an object without an indexed identity (an MDS shard) fixes
    the version this process reads (``runtime/versions.py``): a later range, and the
    shard's download, are conditional on it, so once the object is rewritten both are
    refused by that condition (the message says "then another": the new version's identity
    never came back), with nothing published; a process that read nothing (a fresh
    fetcher) downloads the new version."""
    from astream.errors import ObjectChangedError

    await seed(remote_target, "pin.bin", SMALL)
    new = bytes(b ^ 0xA5 for b in SMALL)
    proxy = make_proxy(remote_target.upstream)
    store = remote_target.open(proxy=proxy)
    root = str(tmp_path / "cache")
    shard = _shard(root, store.url, "pin.bin", len(SMALL))
    fetcher = _fetcher(root, store)
    key = (store.url, "pin.bin")
    refused = r"this process read it earlier at version \S+, then another"
    try:
        cached = (shard.files.raw_path, len(SMALL))
        got = await fetcher.versions.read(store, store.url, "pin.bin", 0, 100, None, cached)
        assert got == SMALL[:100]
        first = fetcher.versions.of(key)
        assert first
        again = await fetcher.versions.read(store, store.url, "pin.bin", 100, 300, None)
        assert again == SMALL[100:300] and fetcher.versions.of(key) == first
        await seed(remote_target, "pin.bin", new)
        proxy.reset_stats()
        with pytest.raises(ObjectChangedError, match=refused):
            await fetcher.versions.read(store, store.url, "pin.bin", 300, 400, None)
        with pytest.raises(ObjectChangedError, match=refused) as ei:
            await fetcher.download(shard)
        assert ei.value.url is not None and ei.value.url.endswith("/pin.bin")
        # both refused by the condition: the server answered 412 (fake-gcs-server ignores
        # ifGenerationMatch; the backend refuses on the generation the answer names)
        statuses = [st for _, _, st in proxy.stats.answered]
        assert len(statuses) == 2
        assert statuses == ([206, 206] if remote_target.name == "gcs" else [412, 412])
        assert not os.path.exists(shard.files.raw_path)
        assert not [n for n in os.listdir(root) if ".tmp-" in n]
        fresh = _fetcher(root, store)
        assert await fresh.download(shard)
    finally:
        await store.aclose()
    assert _read(shard.files.raw_path) == new
    assert os.getxattr(shard.files.raw_path, XATTR) == fresh.versions.of(key).encode()
    assert fresh.versions.of(key) != first
    # the first process now meets the other's file: the version it names is not its own
    assert fetcher.versions.unchecked() == [key]
    with pytest.raises(ObjectChangedError, match="read it by ranges at version"):
        fetcher.versions.sweep()
    assert fetcher.versions.unchecked() == []
    with pytest.raises(ObjectChangedError, match="read it by ranges at version"):
        fetcher.versions.check_file(shard.files.raw_path, key, "pin.bin")
    fresh.versions.check_file(shard.files.raw_path, key, "pin.bin")  # its own: no error
    fresh.versions.sweep()


def test_versions_keep_one_version() -> None:
    from astream.errors import ObjectChangedError
    from astream.runtime.versions import Versions

    v = Versions()
    k = ("s3://b/p", "shard.00000.mds")
    v.keep(k, [], "u")
    assert v.of(k) is None
    v.keep(k, ['"abc"', "abc"], "u")  # a listing's unquoted ETag is the header's quoted one
    assert v.of(k) == '"abc"'
    with pytest.raises(ObjectChangedError, match=r"came from at version abc, then def;.*\[u\]$"):
        v.keep(k, ["abc", '"def"'], "u", "came from at")
    assert v.of(k) == '"abc"'
    assert v.subset([k, ("s3://b/p", "other")]) == {k: '"abc"'}


def test_a_board_shares_the_first_version(tmp_path: Any) -> None:
    """Two processes' ``Versions`` on one board: the second adopts the first's version, a
    version read later that is not the board's is refused (naming both), and a board that
    cannot be made (its directory under a file) changes nothing."""
    from astream.errors import ObjectChangedError
    from astream.runtime.versions import Board, Versions

    board = Board.new(str(tmp_path))
    k = ("s3://b/p", "shard.00000.mds")
    one, two = Versions(board), Versions(board)
    assert two.of(k) is None
    one.keep(k, ['"abc"'], "u")
    assert two.of(k) == '"abc"'  # adopted from the board
    assert two.how(k) == "another process of this job read it at"
    three = Versions(board)
    with pytest.raises(
        ObjectChangedError, match=r"another process of this job read it at version abc, then def"
    ):
        three.keep(k, ['"def"'], "u")
    assert three.of(k) == '"abc"'  # the job's version stays the board's
    assert board.claim(k, "abc") == '"abc"'
    board.remove()
    assert not os.path.exists(board.path)

    (tmp_path / "file").write_bytes(b"")
    nowhere = Board(str(tmp_path / "file" / "board"))
    lone = Versions(nowhere)
    lone.keep(k, ['"abc"'], "u")
    assert lone.of(k) == '"abc"' and nowhere.lookup(k) is None
    assert Versions(nowhere).of(k) is None


async def test_a_prefetch_reads_its_object_in_the_gets_it_was_given(
    remote_target: Target, make_proxy: Callable[..., FaultProxy], tmp_path: Any
) -> None:
    """``Streams(split, slots)``: that many near-equal ranged GETs, whatever ``part_size``
    says; one GET for a split of 1. The bytes land exact either way."""
    await seed(remote_target, "even.bin", BLOB)
    proxy = make_proxy(remote_target.upstream)
    store = remote_target.open(proxy=proxy)
    try:
        for split, root in ((3, "c3"), (1, "c1")):
            proxy.reset_stats()
            shard = _shard(str(tmp_path / root), store.url, "even.bin", len(BLOB))
            fetcher = _fetcher(str(tmp_path / root), store)
            assert await fetcher.download(shard, streams=Streams(split, Slots(4)))
            assert _read(shard.files.raw_path) == BLOB
            assert fetcher.stats.range_requests == split
            if remote_target.name != "azure":  # Azure's SDK splits a read into blocks
                cuts = [len(BLOB) * i // split for i in range(split + 1)]
                want = sorted(f"bytes={cuts[i]}-{cuts[i + 1] - 1}" for i in range(split))
                assert sorted(r for _p, r in proxy.stats.ranges) == want
            assert proxy.stats.total_bytes == len(BLOB)
    finally:
        await store.aclose()


async def test_the_gets_of_all_prefetches_share_their_slots(
    remote_target: Target, make_proxy: Callable[..., FaultProxy], tmp_path: Any
) -> None:
    """Two downloads of 2 GETs each over 2 shared slots: while the first two GETs are held at
    the server, no third is sent; released, all four complete, bytes exact."""
    await seed(remote_target, "a.bin", BLOB)
    await seed(remote_target, "b.bin", BLOB[::-1])
    proxy = make_proxy(remote_target.upstream)
    store = remote_target.open(proxy=proxy)
    gate = proxy.hold(lambda method, path, rng: method == "GET")
    slots = Slots(2)
    try:
        shards = [
            _shard(str(tmp_path / key), store.url, key, len(BLOB)) for key in ("a.bin", "b.bin")
        ]
        fetchers = [_fetcher(str(tmp_path / key), store) for key in ("a.bin", "b.bin")]
        tasks = [
            asyncio.ensure_future(f.download(s, streams=Streams(2, slots)))
            for f, s in zip(fetchers, shards)
        ]
        for _ in range(200):  # until two GETs wait at the proxy
            if len(proxy.stats.held) >= 2:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)  # time for a third to arrive, were it sent
        assert len(proxy.stats.held) == 2, proxy.stats.held
        gate.set()
        assert await asyncio.gather(*tasks) == [True, True]
    finally:
        gate.set()
        await store.aclose()
    assert _read(shards[0].files.raw_path) == BLOB
    assert _read(shards[1].files.raw_path) == BLOB[::-1]
    assert gets(proxy) == 4


async def _steal_case(
    remote_target: Target,
    make_proxy: Callable[..., FaultProxy],
    tmp_path: Any,
    slots: Slots,
    fault: str | None = None,
    rewrite: bytes | None = None,
) -> tuple[FaultProxy, list[Any], list[Any], list[ShardFetcher]]:
    """Two prefetches over ``slots`` (2): ``small.bin`` and ``b.bin`` (BLOB), one GET each,
    the GET of ``b.bin`` held at the proxy until ``small.bin`` is in. ``fault``: planned on the
    GET of the second half of ``b.bin``, should it be split off. ``rewrite``: the new content of
    ``b.bin``, written after that second half was read and before the held GET goes on."""
    await seed(remote_target, "small.bin", BLOB[:1000])
    await seed(remote_target, "b.bin", BLOB)
    proxy = make_proxy(remote_target.upstream)
    store = remote_target.open(proxy=proxy)
    whole = f"bytes=0-{len(BLOB) - 1}"
    gate = proxy.hold(lambda method, path, rng: path.endswith("b.bin") and rng == whole)
    if fault is not None:
        proxy.plan(fault, path="b.bin", rng=lambda r: r not in ("", whole))
    shards = [
        _shard(str(tmp_path / "small"), store.url, "small.bin", 1000),
        _shard(str(tmp_path / "b"), store.url, "b.bin", len(BLOB)),
    ]
    fetchers = [_fetcher(str(tmp_path / k), store) for k in ("small", "b")]
    try:
        big = asyncio.ensure_future(fetchers[1].download(shards[1], streams=Streams(1, slots)))
        for _ in range(200):  # the whole-object GET waits at the proxy
            if proxy.stats.held:
                break
            await asyncio.sleep(0.01)
        assert proxy.stats.held
        assert await fetchers[0].download(shards[0], streams=Streams(1, slots))
        await asyncio.sleep(0.1)  # the split-off GET, if any, is sent meanwhile
        if rewrite is not None:
            await seed(remote_target, "b.bin", rewrite)
        gate.set()
        results = await asyncio.gather(big, return_exceptions=True)
    finally:
        gate.set()
        await store.aclose()
    return proxy, results, shards, fetchers


async def test_a_slot_that_would_idle_splits_the_longest_running_get(
    remote_target: Target, make_proxy: Callable[..., FaultProxy], tmp_path: Any
) -> None:
    """A GET ends while nothing waits for its slot: the running GET with the most bytes left
    stops halfway through them, and a new GET reads the rest into the same file. The bytes
    land exact, and each byte is counted once."""
    slots = Slots(2, steal_min=1 << 20, idle=lambda: True)
    proxy, results, shards, fetchers = await _steal_case(remote_target, make_proxy, tmp_path, slots)
    assert results == [True]
    assert _read(shards[1].files.raw_path) == BLOB
    # then each GET that ends (the first one at its cut) splits the other while its half is
    # at least steal_min: how many times depends on the timing, the first split does not
    assert slots.steals >= 1
    assert fetchers[1].stats.range_requests == 1 + slots.steals
    assert fetchers[1].stats.bytes_fetched == len(BLOB)  # a cut GET counted to its cut only
    if remote_target.name != "azure":  # Azure's SDK splits a read into blocks of its own
        b_gets = [r for p, r in proxy.stats.ranges if p.endswith("b.bin")]
        assert b_gets[:2] == [f"bytes=0-{len(BLOB) - 1}", f"bytes={len(BLOB) // 2}-{len(BLOB) - 1}"]
        assert len(b_gets) == 1 + slots.steals
    assert slots.free == 2 and not slots.lanes and slots.waiting == 0


@pytest.mark.parametrize("why", ["a download waits to start", "the half is under steal_min"])
async def test_no_split_while_a_download_waits_or_the_half_is_small(
    why: str, remote_target: Target, make_proxy: Callable[..., FaultProxy], tmp_path: Any
) -> None:
    """A freed slot is kept for a download that waits to start (``idle()`` false), and a
    running GET is never split into halves smaller than ``steal_min``."""
    if why == "a download waits to start":
        slots = Slots(2, steal_min=1 << 20, idle=lambda: False)
    else:
        slots = Slots(2, steal_min=len(BLOB) // 2 + 1, idle=lambda: True)
    proxy, results, shards, fetchers = await _steal_case(remote_target, make_proxy, tmp_path, slots)
    assert results == [True]
    assert _read(shards[1].files.raw_path) == BLOB
    assert slots.steals == 0 and fetchers[1].stats.range_requests == 1
    assert slots.free == 2
    if remote_target.name != "azure":
        assert [r for p, r in proxy.stats.ranges if p.endswith("b.bin")] == [
            f"bytes=0-{len(BLOB) - 1}"
        ]


async def test_a_failed_split_off_get_fails_its_download_and_frees_every_slot(
    remote_target: Target, make_proxy: Callable[..., FaultProxy], tmp_path: Any
) -> None:
    """The split-off GET is refused (403): the download raises it, publishes nothing, and
    every slot is free again with no GET left to split."""
    slots = Slots(2, steal_min=1 << 20, idle=lambda: True)
    proxy, results, shards, _ = await _steal_case(
        remote_target, make_proxy, tmp_path, slots, fault="403"
    )
    assert slots.steals >= 1
    assert proxy.stats.faults["403"] == 1
    assert len(results) == 1 and isinstance(results[0], Exception), results
    assert not os.path.exists(shards[1].files.raw_path)
    assert slots.free == 2 and not slots.lanes and slots.waiting == 0


async def test_a_split_off_get_of_another_version_fails_the_download(
    remote_target: Target, make_proxy: Callable[..., FaultProxy], tmp_path: Any
) -> None:
    """The object is rewritten after its split-off second half was read and before the first
    GET reads up to the cut: the two GETs name two versions, so the download is an
    ``ObjectChangedError`` and publishes nothing -- never a file of two versions."""
    from astream.errors import ObjectChangedError

    slots = Slots(2, steal_min=1 << 20, idle=lambda: True)
    new = bytes(b ^ 0x5A for b in BLOB)
    _, results, shards, _ = await _steal_case(
        remote_target, make_proxy, tmp_path, slots, rewrite=new
    )
    assert slots.steals >= 1
    assert len(results) == 1 and isinstance(results[0], ObjectChangedError), results
    assert "rewritten while it downloaded" in str(results[0])
    assert not os.path.exists(shards[1].files.raw_path)
    assert slots.free == 2 and not slots.lanes
