"""How many GETs a prefetched shard is read in (``Prefetcher.split``), and the stream slots all
of a prefetcher's downloads share.

The rule is exercised on a prefetcher with a recording download (the shards are plain objects);
the wiring on a real dataset over moto behind the counting proxy: a lone cold shard is read in
the GETs the rule gives, which tile it exactly, and every sample comes back; a running GET is
split into an idle slot only once the consumer waits for its shard.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
import uuid
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from astream import MDSWriter, StreamingDataset
from astream.runtime.fetch import Slots, Streams
from astream.runtime.prefetch import Prefetcher
from astream.storage.sync import upload


@dataclass
class _Files:
    raw_path: str
    raw_size: int
    zip_size: int | None = None


@dataclass
class _Shard:
    files: _Files
    remote: str = "s3://bucket/ds"


class _Catalog:
    def __init__(self, tmp: Any, sizes: list[int], zip_sizes: list[int | None] | None = None):
        zips = zip_sizes or [None] * len(sizes)
        self.shards = [
            _Shard(_Files(str(tmp / f"shard.{i:05d}.mds"), n, z))
            for i, (n, z) in enumerate(zip(sizes, zips))
        ]


class _Downloads:
    """Records each download's ``Streams`` and how many run at once; download ``s`` ends
    when ``done[s]`` is set."""

    def __init__(self, n: int) -> None:
        self.calls: dict[int, Streams] = {}
        self.running = 0
        self.peak = 0
        self.done = [asyncio.Event() for _ in range(n)]

    async def __call__(self, s: int, block: bool, streams: Streams) -> bool:
        assert block is False  # a prefetch never waits for cache room
        self.calls[s] = streams
        self.running += 1
        self.peak = max(self.peak, self.running)
        try:
            await self.done[s].wait()
        finally:
            self.running -= 1
        return True


def _prefetcher(
    tmp: Any, sizes: list[int], download: Any, concurrency: int, split_min: int, **kw: Any
) -> Prefetcher:
    """A prefetcher on the running loop over shards of ``sizes`` bytes, none in the cache."""
    return Prefetcher(
        _Catalog(tmp, sizes, **kw),  # type: ignore[arg-type]
        download,
        concurrency=concurrency,
        split_min=split_min,
        loop=asyncio.get_running_loop(),
    )


async def _prefetch(
    tmp: Any, sizes: list[int], concurrency: int, split_min: int, **kw: Any
) -> _Downloads:
    """Want every shard at once, then end the downloads one at a time, in order."""
    n = len(sizes)
    dl = _Downloads(n)
    pf = _prefetcher(tmp, sizes, dl, concurrency, split_min, **kw)
    for s in range(n):
        pf.want(s)
    futs = [pf.take(s) for s in range(n)]
    for s in range(n):
        await asyncio.sleep(0.02)
        assert dl.running == min(concurrency, n - s)  # the shard slots: all busy
        dl.done[s].set()
        assert await futs[s]  # type: ignore[misc]
    assert sorted(dl.calls) == list(range(n))
    assert dl.peak == min(concurrency, n)
    slots = {id(st.slots) for st in dl.calls.values()}
    assert len(slots) == 1  # one set of stream slots for all the prefetcher's downloads
    assert next(iter(dl.calls.values())).slots.free == concurrency  # all free again
    return dl


async def test_many_shards_wanted_are_one_get_each(tmp_path: Any) -> None:
    dl = await _prefetch(tmp_path, [1000] * 8, concurrency=4, split_min=100)
    assert [dl.calls[s].split for s in range(8)] == [1] * 8


async def test_few_shards_wanted_share_the_slots(tmp_path: Any) -> None:
    dl = await _prefetch(tmp_path, [1000, 1000], concurrency=4, split_min=300)
    assert [dl.calls[s].split for s in range(2)] == [2, 2]
    dl = await _prefetch(tmp_path, [1000, 1000, 1000], concurrency=8, split_min=100)
    assert [dl.calls[s].split for s in range(3)] == [2, 2, 2]  # 8 // 3


async def test_no_get_smaller_than_split_min(tmp_path: Any) -> None:
    for size, split_min, want in ((1000, 300, 4), (1000, 600, 2), (1000, 1000, 1), (50, 100, 1)):
        dl = await _prefetch(tmp_path, [size], concurrency=4, split_min=split_min)
        assert dl.calls[0].split == want, (size, split_min)


async def test_a_compressed_shard_splits_by_its_fetched_size(tmp_path: Any) -> None:
    dl = await _prefetch(tmp_path, [1000], concurrency=8, split_min=100, zip_sizes=[300])
    assert dl.calls[0].split == 3


def _upload_samples(
    s3_bucket: str, tmp_path_factory: pytest.TempPathFactory, n: int, seed: int, **kw: Any
) -> str:
    """``n`` samples of 1-2 KB labelled 0 to n-1, written with ``kw``, on the S3 emulator."""
    path = str(tmp_path_factory.mktemp("streams") / "ds")
    rng = np.random.default_rng(seed)
    with MDSWriter(out=path, columns={"blob": "bytes", "label": "int"}, **kw) as w:
        for i in range(n):
            w.write({"blob": rng.bytes(int(rng.integers(1000, 2000))), "label": i})
    url = f"{s3_bucket}/streams-{uuid.uuid4().hex[:8]}"
    upload(path, url)
    return url


@pytest.fixture(scope="module")
def one_shard(s3_bucket: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """200 samples of 1-2 KB in one shard of ~300 KB, on the S3 emulator."""
    return _upload_samples(s3_bucket, tmp_path_factory, 200, 9)


def _cold_dataset(remote: str, tmp_path: Any, proxy: Any) -> StreamingDataset:
    """Over ``proxy``, an empty cache; the first batch waits for its shard (no ranged reads)."""
    return StreamingDataset(
        remote=remote,
        local=str(tmp_path / "cache"),
        batch_size=4,
        range_first_batches=0,
        storage_options={"endpoint_url": proxy.url},
    )


def test_a_lone_cold_shard_is_read_in_the_gets_the_rule_gives(
    one_shard: str, s3_server: Any, make_proxy: Any, tmp_path: Any
) -> None:
    proxy = make_proxy(s3_server.url)
    ds = _cold_dataset(one_shard, tmp_path, proxy)
    assert len(ds.shards) == 1
    size = ds.catalog.shards[0].files.raw_size
    ds.engine.split_min = size // 3 + 1  # three GETs (under the 16 slots, and far under 8 MiB)
    got = sorted(int(x["label"]) for x in ds)
    assert got == list(range(200))
    shard_gets = [r for p, r in proxy.stats.ranges if p.endswith(ds.shards[0].raw_data.basename)]
    cuts = [size * i // 3 for i in range(4)]
    assert sorted(shard_gets) == sorted(f"bytes={cuts[i]}-{cuts[i + 1] - 1}" for i in range(3))


@pytest.fixture(scope="module")
def two_shards(s3_bucket: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A shard of 300 samples of 1-2 KB, then one of 20 samples, on the S3 emulator."""
    return _upload_samples(s3_bucket, tmp_path_factory, 320, 10, size_limit=460_000)


def test_the_slot_a_finished_shard_frees_splits_the_shard_still_downloading(
    two_shards: str, s3_server: Any, make_proxy: Any, tmp_path: Any
) -> None:
    """An iteration over two cold shards, one GET each in two slots: the first shard's GET
    waits at the server while the consumer waits for it and the second shard comes in, so
    the slot that frees splits the first shard's GET in two. Every sample comes back, from a
    file tiled by the two GETs."""
    proxy = make_proxy(s3_server.url)
    ds = _cold_dataset(two_shards, tmp_path, proxy)
    sizes = [sh.files.raw_size for sh in ds.catalog.shards]
    assert len(sizes) == 2 and sizes[0] > 10 * sizes[1]
    ds.engine.concurrency = 2
    ds.engine.split_min = sizes[0]  # one GET per shard
    ds.engine.steal_min = 4096
    first = ds.shards[0].raw_data.basename
    whole = f"bytes=0-{sizes[0] - 1}"
    gate = proxy.hold(lambda method, path, rng: path.endswith(first) and rng == whole)
    threading.Timer(1.0, gate.set).start()  # the second shard is in long before
    got = sorted(int(x["label"]) for x in ds)
    assert got == list(range(320))
    first_gets = [r for p, r in proxy.stats.ranges if p.endswith(first)]
    assert first_gets[:2] == [whole, f"bytes={sizes[0] // 2}-{sizes[0] - 1}"]
    assert ds.stats.range_requests == len(first_gets) + 1


@pytest.fixture(scope="module")
def two_even_shards(s3_bucket: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """320 samples of 1-2 KB in two shards of about 240 KB each, on the S3 emulator."""
    return _upload_samples(s3_bucket, tmp_path_factory, 320, 11, size_limit=250_000)


@pytest.mark.parametrize("path", ["sync", "aiter-thread", "aiter-loop"])
def test_a_shard_is_split_only_once_the_consumer_waits_for_it(
    path: str, two_even_shards: str, s3_server: Any, make_proxy: Any, tmp_path: Any
) -> None:
    """Two cold shards, one GET each in two slots, the second shard's GET held at the server.
    The first shard comes in and frees its slot while the consumer reads it: nobody waits for
    the second shard yet, so its GET is not split (a split costs a request and the bytes in
    flight past the cut). Once the consumer needs the second shard, the free slot splits that
    GET at once: the second half arrives while the first is still held. On the synchronous
    path and on ``aiter`` (downloads on astream's I/O thread, or on the caller's loop)."""
    proxy = make_proxy(s3_server.url)
    ds = _cold_dataset(two_even_shards, tmp_path, proxy)
    sizes = [sh.files.raw_size for sh in ds.catalog.shards]
    counts = [sh.samples for sh in ds.shards]
    assert len(sizes) == 2 and min(sizes) > 100_000, sizes
    ds.engine.concurrency = 2
    ds.engine.split_min = max(sizes)  # one GET per shard
    ds.engine.steal_min = 4096
    second = ds.shards[1].raw_data.basename
    whole = f"bytes=0-{sizes[1] - 1}"
    half = f"bytes={sizes[1] // 2}-{sizes[1] - 1}"
    gate = proxy.hold(lambda method, path, rng: path.endswith(second) and rng == whole)
    threading.Timer(30.0, gate.set).start()  # a run that never splits fails, never hangs
    # whole batches of the first shard only (batch 4): the consumer never asked for the second
    n_first = counts[0] // 4 * 4 - 4
    seen_split = threading.Event()

    def second_gets() -> list[str]:
        return [r for p, r in proxy.stats.ranges if p.endswith(second)]

    def unsplit_until_needed() -> None:
        assert proxy.stats.held and second_gets() == [whole]

        def watch() -> None:  # the split-off half comes while the first half is held; go on
            for _ in range(1000):
                if half in second_gets():
                    seen_split.set()
                    break
                time.sleep(0.01)
            gate.set()

        threading.Thread(target=watch, daemon=True).start()

    if path == "sync":
        it = iter(ds)
        first = [int(next(it)["label"]) for _ in range(n_first)]
        time.sleep(0.3)  # a split would have been sent when the first shard's slot freed
        unsplit_until_needed()
        rest = [int(x["label"]) for x in it]
    else:

        async def run() -> tuple[list[int], list[int]]:
            ait = ds.aiter(io=path.split("-")[1])
            first = [int((await ait.__anext__())["label"]) for _ in range(n_first)]
            await asyncio.sleep(0.3)  # as above; the downloads' loop may be this one
            unsplit_until_needed()
            return first, [int(x["label"]) async for x in ait]

        first, rest = asyncio.run(run())
    assert first == list(range(n_first))
    assert seen_split.is_set(), second_gets()
    assert first + rest == list(range(320))
    # then each GET of it that ends while the first is held splits what that one has left
    assert second_gets()[:2] == [whole, half]


async def test_held_downloads_run_half_the_slots_until_released(tmp_path: Any) -> None:
    """While the first batch is read by ranges the prefetcher is held: its earliest downloads
    start, but at most ``early`` GETs run; released, every slot is free."""

    class _Gets:
        def __init__(self) -> None:
            self.running: list[int] = []
            self.done = asyncio.Event()

        async def __call__(self, s: int, block: bool, streams: Streams) -> bool:
            assert streams.split == 1  # 8 wanted, 8 slots
            async with streams.slots:  # what each GET of the fetcher does
                self.running.append(s)
                await self.done.wait()
            return True

    gets = _Gets()
    pf = _prefetcher(tmp_path, [1000] * 8, gets, concurrency=8, split_min=1000)
    assert pf.early == 4
    pf.hold()
    for s in range(8):
        pf.want(s)
    await asyncio.sleep(0.05)
    assert gets.running == [0, 1, 2, 3]  # the earliest four, in the order wanted
    pf.release()
    pf.release()  # idempotent
    await asyncio.sleep(0.05)
    assert sorted(gets.running) == list(range(8))
    gets.done.set()
    assert await asyncio.gather(*(pf.take(s) for s in range(8))) == [True] * 8  # type: ignore[misc]


async def test_a_full_hold_runs_no_get_until_released(tmp_path: Any) -> None:
    """``hold(0)`` (a worker whose first batch the main process reads): downloads are wanted
    and start in order, but none of their GETs runs before the release."""
    running: list[int] = []
    done = asyncio.Event()

    async def download(s: int, block: bool, streams: Streams) -> bool:
        async with streams.slots:
            running.append(s)
            await done.wait()
        return True

    pf = _prefetcher(tmp_path, [1000] * 3, download, concurrency=4, split_min=1000)
    pf.hold(0)
    for s in range(3):
        pf.want(s)
    await asyncio.sleep(0.05)
    assert running == []
    pf.release()
    await asyncio.sleep(0.05)
    assert running == [0, 1, 2]
    done.set()
    assert await asyncio.gather(*(pf.take(s) for s in range(3))) == [True] * 3  # type: ignore[misc]


async def test_slots_split_running_gets_only_while_no_download_waits_to_start(
    tmp_path: Any,
) -> None:
    """The prefetcher's slots split a running GET (``steal_min``) only while every wanted
    download has started: with 3 shards and 2 shard slots, not while the third waits."""
    dl = _Downloads(3)
    pf = Prefetcher(
        _Catalog(tmp_path, [1000] * 3),  # type: ignore[arg-type]
        dl,
        concurrency=2,
        split_min=1000,
        steal_min=123,
        loop=asyncio.get_running_loop(),
    )
    for s in range(3):
        pf.want(s)
    await asyncio.sleep(0.02)
    slots = dl.calls[0].slots
    assert slots.steal_min == 123 and sorted(dl.calls) == [0, 1]
    assert slots._idle is not None and not slots._idle()  # shard 2 waits to start
    dl.done[0].set()
    await asyncio.sleep(0.02)
    assert sorted(dl.calls) == [0, 1, 2] and slots._idle()  # all started
    dl.done[1].set()
    dl.done[2].set()
    assert await asyncio.gather(*(pf.take(s) for s in range(3))) == [True] * 3  # type: ignore[misc]
    assert pf._unfinished == 0 and pf._active == 0


async def test_slots_are_first_come_first_served_and_a_cancelled_waiter_passes_its_slot_on() -> (
    None
):
    slots = Slots(1)
    assert slots.take() and not slots.take()
    order: list[str] = []

    async def waiter(name: str) -> None:
        await slots.acquire()
        order.append(name)

    a, _b, c = (asyncio.ensure_future(waiter(n)) for n in "abc")
    await asyncio.sleep(0)
    assert slots.waiting == 3 and not slots.take()  # nobody jumps the queue
    slots.release()  # handed to a...
    a.cancel()  # ...cancelled before it ran: the slot goes on to b
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert a.cancelled() and order == ["b"] and slots.waiting == 1
    slots.release()
    await c
    assert order == ["b", "c"]
    slots.release()
    assert slots.free == 1 and slots.waiting == 0


def test_a_dataset_dropped_after_a_cold_epoch_is_freed_at_once(
    two_shards: str, s3_server: Any, tmp_path: Any
) -> None:
    """No reference cycle keeps a dataset alive after a cold epoch (its prefetcher's GET slots
    ask the prefetcher whether a download waits, without holding it): dropped, it is freed
    at once, engine and all, so its cache entry is no longer in use (``astream cache clear``).
    The collector is off from before the epoch: anything left in a cycle stays."""
    gc.collect()
    gc.disable()
    try:
        ds = StreamingDataset(
            remote=two_shards,
            local=str(tmp_path / "cache"),
            batch_size=4,
            storage_options={"endpoint_url": s3_server.url},
        )
        assert sorted(int(x["label"]) for x in ds) == list(range(320))
        refs = [weakref.ref(ds), weakref.ref(ds.engine)]  # the engine holds the cache lease
        del ds
        assert [r() for r in refs] == [None, None]
    finally:
        gc.enable()
