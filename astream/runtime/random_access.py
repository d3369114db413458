"""Random access to one sample (``get``/``aget``): read from the cache, from memory, by
ranges, or from its shard fetched whole.

Theory of operation
-------------------
A shard this process has open is read from its map. One in the cache that it has not opened
is read with ``pread`` (``ShardOpener.read_unmapped``: the sample's offsets, then its bytes),
where opening would map the shard and check its whole offsets table for one sample; under a
``cache_limit`` (a read pins the shard) or a hash check it is opened. An uncompressed shard
not in the cache is read with two ranged GETs -- its header (then remembered) and exactly the
sample's bytes -- so one sample never costs a shard download. The sample's bytes are then
kept in a bounded memory tier (``SampleMemo``, ``random_memory`` bytes, least recently used
out first), so reading it again costs no request and counts toward nothing.

Promotion to a whole-shard fetch is rent-or-buy, in time: a ranged GET costs mostly its
latency, a download mostly its bytes. The measured seconds of the ranged reads of one shard
(its header's and its samples', never a memory hit) are its rent; its price is one request's
latency plus its bytes at the bandwidth of a whole-shard download, both running estimates per
store (``range_costs.StoreCosts``: learned from every ranged read and every download, seeded
before any). Once the rent reaches the price the shard is fetched whole in the background;
reads of that shard then wait for that fetch and are local. The time spent on a shard is then
at most about twice that of the better of the two pure strategies (ranges only, or the shard
at the first read), as far as the estimates are right, and sparse random access -- a few
samples of each big shard -- never downloads a shard whose download costs more than its
reads. A Parquet row group read by its pages is promoted by bytes instead (its pages' bytes
against its size): a row's pages are several concurrent GETs whose latencies overlap, and
decoded rows are not kept in memory. A split shard's price counts two requests (its meta
file and its data file). A compressed shard is fetched whole through the cache, since its
samples cannot be addressed inside the compressed bytes. So is every shard of a stream read
with ``validate_hash``: its hash covers the whole file, so random access returns a sample only
from a shard whose whole bytes matched the index (``_sample_rangeable``); nothing of such a
shard is ever read by range or kept in memory.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from astream import bridge
from astream.runtime.fetch import is_complete
from astream.runtime.parts import ProcessParts
from astream.runtime.range_costs import StoreCosts
from astream.runtime.ranges import _RANGE_GETS, RangeReads

__all__ = ["RandomAccess"]


class RandomAccess(RangeReads):
    """``get``/``aget`` of an engine, and the promotion of a shard read by ranges."""

    def get(self, i: int) -> dict[str, Any]:
        """Sample ``i`` (a global index) without downloading its shard when avoidable."""
        parts = self._parts()
        s, li = self.catalog.locate_one(i)
        local = self._from_cache(parts, s, li)
        if local is not None:
            return local
        if self._sample_rangeable(s):
            kept = self._remembered(s, li)  # without a trip to the loop thread
            return kept if kept is not None else bridge.run(self.aget_range(s, li))
        if self.catalog.entries[s].format == "parquet" and self._rangeable(s):
            got = bridge.run(self.aget_pages(s, li))
            if got is not None:
                return got
        h = parts.random.open(s, lambda s: bridge.run(self._fetch_whole(s, True)))
        parts.stats.samples += 1
        return h.sample(li)

    async def aget(self, i: int) -> dict[str, Any]:
        parts = self._parts()
        s, li = self.catalog.locate_one(i)
        local = self._from_cache(parts, s, li)
        if local is not None:
            return local
        if self._sample_rangeable(s):
            return await self.aget_range(s, li)
        if self.catalog.entries[s].format == "parquet" and self._rangeable(s):
            got = await self.aget_pages(s, li)
            if got is not None:
                return got
        await self._fetch_whole(s, True)
        h = parts.random.try_open(s)
        if h is None:
            return await self.aget(i)
        parts.stats.samples += 1
        return h.sample(li)

    @staticmethod
    def _from_cache(parts: ProcessParts, s: int, li: int) -> dict[str, Any] | None:
        """Sample ``li`` of shard ``s`` from this machine: from the shard's map when this
        process has it open, else read from the cached file without opening it, else from the
        shard opened; None when the shard is not in the cache."""
        opener = parts.random
        h = opener.cached(s)
        if h is None:
            got = opener.read_unmapped(s, li)
            if got is not None:
                parts.stats.samples += 1
                return got
            h = opener.try_open(s)
        if h is None:
            return None
        parts.stats.samples += 1
        return h.sample(li)

    def _sample_rangeable(self, s: int) -> bool:
        """Whether random access reads a sample of shard ``s`` by ranged GETs (its header, then
        the sample): an uncompressed MDS or split shard with a remote, read without hash
        validation. A hash covers the whole file, so under ``validate_hash`` (the stream's or
        the dataset's) the shard is downloaded whole, hashed, and the sample read from the
        cache (a mismatch: deleted, fetched once more, then :class:`IntegrityError`)."""
        shard = self.catalog.shards[s]
        return (
            shard.compression is None
            and shard.remote is not None
            and shard.ranges is None
            and (shard.validate_hash or self.validate_hash) is None
        )

    def _remembered(self, s: int, li: int) -> dict[str, Any] | None:
        """Sample ``li`` of ``s`` decoded from the memory tier; None if it is not kept."""
        parts = self._parts()
        data = parts.memo.get(s, li)
        if data is None:
            return None
        parts.stats.samples += 1
        return parts.random.decoder(s).decode(memoryview(data))

    async def aget_range(self, s: int, li: int) -> dict[str, Any]:
        kept = self._remembered(s, li)
        if kept is not None:
            return kept
        parts = self._parts()
        stats = parts.stats
        local = await self._promoted(parts, s, li)
        if local is not None:
            return local
        shard = self.catalog.shards[s]
        assert shard.remote is not None
        store = self.stores.get(shard.remote)
        costs = self._costs(parts, shard.remote)
        t0 = time.perf_counter()
        offsets, spent = await self._range_offsets(parts, s)
        t1 = time.perf_counter()
        rent = 0.0
        if spent:  # this call read the header: its time is rent too
            costs.ranged(spent, t1 - t0)
            rent = t1 - t0
        a, b = offsets[li], offsets[li + 1]
        versions = parts.fetcher.versions
        data = await versions.read(store, shard.remote, shard.raw_key, a, b, shard.etag)
        took = time.perf_counter() - t1
        stats.range_requests += 1
        stats.add_bytes(shard.remote, len(data))
        costs.ranged(len(data), took)
        out = parts.random.decoder(s).decode(memoryview(data))  # a short range raises here
        parts.memo.put(s, li, data)
        size = self.catalog.entries[s].raw_data.bytes
        price = costs.price(size, 1 if shard.meta is None else 2)
        self._maybe_promote(parts, s, rent + took, price)
        stats.samples += 1
        return out

    async def aget_pages(self, s: int, li: int) -> dict[str, Any] | None:
        """Row ``li`` of Parquet row group ``s`` read by its pages (the file's offset indexes
        kept per process); None when it is not to be read so (the caller reads the group
        whole). The bytes of its pages are counted toward the group's promotion, which
        happens once they reach the group's size (rows decoded from pages are not kept in the
        memory tier)."""
        parts = self._parts()
        local = await self._promoted(parts, s, li)
        if local is not None:
            return local
        from astream.parquet.io_pages import index_span

        got = await self._range_read([(s, [li])], asyncio.Semaphore(_RANGE_GETS))
        r = self._range_shards(parts, got).get(s)
        if r is None:
            return None
        span = index_span(self.catalog.entries[s])  # type: ignore[arg-type]
        spent = sum(len(v) for k, v in got[s][0].items() if k != span)  # the pages only
        # in bytes: a row's pages are several concurrent GETs, whose latencies overlap
        self._maybe_promote(parts, s, spent, float(self.catalog.entries[s].raw_data.bytes))
        parts.stats.samples += 1
        out: dict[str, Any] = r.sample(li)
        return out

    async def _promoted(self, parts: ProcessParts, s: int, li: int) -> dict[str, Any] | None:
        """Sample ``li`` of ``s`` from the cache once a promotion of ``s`` started on this loop
        has finished (waiting for it: its bytes are already on the way); None to read a range
        (no promotion, one on another loop, or one that could not make room)."""
        task = parts.promoting.get(s)
        if task is None or task.get_loop() is not asyncio.get_running_loop():
            return None
        try:
            ok = await asyncio.shield(task)
        except Exception:
            ok = False
        opener = parts.random
        h = opener.try_open(s) if ok else None
        if h is None:
            return None
        parts.stats.samples += 1
        return h.sample(li)

    def _maybe_promote(self, parts: ProcessParts, s: int, cost: float, price: float) -> None:
        """Count ``cost`` more spent on ranged reads of shard ``s``; when that rent reaches
        ``price``, fetch it whole in the background (only if the cache has room without
        evicting anything pinned). For an MDS shard both are seconds: its reads' measured time
        against its download's estimated time (``StoreCosts.price``); for a Parquet row group,
        bytes. Buying when the rent paid equals the price bounds the total at twice the better
        choice made in hindsight. A promotion that could not make room starts the count
        again."""
        rent = parts.range_rent
        total = rent.get(s, 0.0) + cost
        rent[s] = total
        promoting = parts.promoting
        if total < price or s in promoting:
            return
        rent[s] = 0.0
        parts.bought[s] = (total, price)
        task = asyncio.get_running_loop().create_task(self._fetch_whole(s, False))
        promoting[s] = task
        task.add_done_callback(_forget_promotion(promoting, s))

    async def _fetch_whole(self, s: int, block: bool) -> bool:
        """:meth:`download` shard ``s``, its time teaching its store's bandwidth when this
        call moved its bytes; once it is in the cache its samples leave the memory tier."""
        shard = self.catalog.shards[s]
        files = shard.files
        if shard.remote is None or is_complete(files.raw_path, files.raw_size):
            return await self.download(s, block)
        parts = self._parts()
        fetched = parts.stats.shards_fetched
        t0 = time.perf_counter()
        ok = await self.download(s, block)
        took = time.perf_counter() - t0
        if ok and parts.stats.shards_fetched > fetched and shard.meta is None:
            moved = files.zip_size if shard.compression is not None else files.raw_size
            self._costs(parts, shard.remote).whole(moved or 0, took)
        if ok:
            parts.memo.drop_shard(s)
        return ok

    @staticmethod
    def _costs(parts: ProcessParts, remote: str) -> StoreCosts:
        costs = parts.costs.get(remote)
        if costs is None:
            costs = parts.costs[remote] = StoreCosts()
        return costs


def _forget_promotion(promoting: dict[int, asyncio.Task[bool]], s: int) -> Any:
    def done(task: asyncio.Task[bool]) -> None:
        if promoting.get(s) is task:
            del promoting[s]
        if not task.cancelled():
            task.exception()  # a failed background fetch only means the next read is a range

    return done
