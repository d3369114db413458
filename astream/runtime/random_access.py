"""Random access to one sample (``get``/``aget``): read from the cache, by ranges, or from its
shard fetched whole.

Theory of operation
-------------------
A shard already in the cache is read from the map; an uncompressed shard that is not is read
with two ranged GETs -- its header (then remembered) and exactly the sample's bytes -- so one
sample never costs a shard download. Promotion to a whole-shard fetch is rent-or-buy, by
bytes: the bytes spent on ranges in one shard (headers and samples) are counted, and once they
reach the shard's size the shard is fetched whole in the background; reads of that shard then
wait for that fetch and are local. Whatever the access pattern, the bytes moved for a shard are
then at most twice those of the better of the two pure strategies (ranges only, or the shard at
the first read), and sparse random access -- a few samples of each big shard -- never downloads
a shard. A compressed shard is fetched whole through the cache, since its samples cannot be
addressed inside the compressed bytes. So is every shard of a stream read with
``validate_hash``: its hash covers the whole file, so random access returns a sample only from
a shard whose whole bytes matched the index (``_sample_rangeable``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from astream import bridge
from astream.runtime.parts import ProcessParts
from astream.runtime.ranges import _RANGE_GETS, RangeReads

__all__ = ["RandomAccess"]


class RandomAccess(RangeReads):
    """``get``/``aget`` of an engine, and the promotion of a shard read by ranges."""

    def get(self, i: int) -> dict[str, Any]:
        """Sample ``i`` (a global index) without downloading its shard when avoidable."""
        opener = self._parts().random
        s, li = self.catalog.locate_one(i)
        h = opener.try_open(s)
        if h is not None:
            self.stats.samples += 1
            return h.sample(li)
        if self._sample_rangeable(s):
            return bridge.run(self.aget_range(s, li))
        if self.catalog.entries[s].format == "parquet" and self._rangeable(s):
            got = bridge.run(self.aget_pages(s, li))
            if got is not None:
                return got
        h = opener.open(s, lambda s: bridge.run(self.download(s, True)))
        self.stats.samples += 1
        return h.sample(li)

    async def aget(self, i: int) -> dict[str, Any]:
        opener = self._parts().random
        s, li = self.catalog.locate_one(i)
        h = opener.try_open(s)
        if h is None:
            if self._sample_rangeable(s):
                return await self.aget_range(s, li)
            if self.catalog.entries[s].format == "parquet" and self._rangeable(s):
                got = await self.aget_pages(s, li)
                if got is not None:
                    return got
            await self.download(s, True)
            h = opener.try_open(s)
            if h is None:
                return await self.aget(i)
        self.stats.samples += 1
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

    async def aget_range(self, s: int, li: int) -> dict[str, Any]:
        parts = self._parts()
        stats = parts.stats
        opener = parts.random
        local = await self._promoted(parts, s, li)
        if local is not None:
            return local
        shard = self.catalog.shards[s]
        assert shard.remote is not None
        store = self.stores.get(shard.remote)
        offsets, spent = await self._range_offsets(parts, s)
        a, b = offsets[li], offsets[li + 1]
        versions = parts.fetcher.versions
        data = await versions.read(store, shard.remote, shard.raw_key, a, b, shard.etag)
        stats.range_requests += 1
        stats.add_bytes(shard.remote, len(data))
        self._maybe_promote(parts, s, spent + len(data))
        stats.samples += 1
        return opener.decoder(s).decode(memoryview(data))

    async def aget_pages(self, s: int, li: int) -> dict[str, Any] | None:
        """Row ``li`` of Parquet row group ``s`` read by its pages (the file's offset indexes
        kept per process); None when it is not to be read so (the caller reads the group
        whole). The bytes are counted toward the group's promotion, as for MDS ranges."""
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
        self._maybe_promote(parts, s, spent)
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

    def _maybe_promote(self, parts: ProcessParts, s: int, nbytes: int) -> None:
        """Count ``nbytes`` more spent on ranges in shard ``s``; when the total reaches the
        shard's size, fetch it whole in the background (only if the cache has room without
        evicting anything pinned). Rent-or-buy: ranges cost what they move, a download the
        shard's size, so buying when the rent paid equals the price bounds the total at twice
        the better choice made in hindsight. A promotion that could not make room starts the
        count again."""
        spent = parts.range_bytes
        total = spent.get(s, 0) + nbytes
        spent[s] = total
        promoting = parts.promoting
        if total < self.catalog.entries[s].raw_data.bytes or s in promoting:
            return
        spent[s] = 0
        task = asyncio.get_running_loop().create_task(self.download(s, False))
        promoting[s] = task
        task.add_done_callback(_forget_promotion(promoting, s))


def _forget_promotion(promoting: dict[int, asyncio.Task[bool]], s: int) -> Any:
    def done(task: asyncio.Task[bool]) -> None:
        if promoting.get(s) is task:
            del promoting[s]
        if not task.cancelled():
            task.exception()  # a failed background fetch only means the next read is a range

    return done
