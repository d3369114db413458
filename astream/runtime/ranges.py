"""Reading a shard's samples by ranged GETs, and when to: the start of a cold iteration, the
first batches of a loader's workers, random access.

Theory of operation
-------------------
The start of a cold iteration reads its first batches by ranges while whole shards download:
an uncompressed MDS shard's wanted samples (only when the batch's ranges are estimated at most
``range_share`` of its shards' bytes: a dense batch waits for the downloads), or a Parquet row
group's pages holding the wanted rows when its file has a page index
(``parquet/io_pages.py``; only when every row group of the batch needs at most
``page_share`` of its bytes that way).

An MDS shard's header (its sample offsets) is read once per process and kept; concurrent first
reads share one GET. Wanted samples closer than ``_RANGE_GAP`` bytes share a GET, at most
``_RANGE_GETS`` GETs at a time. Every GET is conditional on the version of the object this
process read first (``runtime/versions.py``), so bytes of two versions never mix.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from astream.core.shard import header_size, parse_offsets
from astream.errors import FormatError
from astream.runtime.batch_groups import Groups
from astream.runtime.fetch import RemoteShard, is_complete
from astream.runtime.parts import EngineBase, ProcessParts
from astream.runtime.prefetch import Lookahead
from astream.runtime.reader import ShardOpener
from astream.runtime.shard_handles import RangeShard

__all__ = ["RangeReads"]

Wants = list[tuple[int, list[int]]]
# per shard: (its wanted samples back to back, their offsets in that buffer, sample -> slot);
# for a Parquet row group: ({object range: its bytes}, None, row -> slot)
Read = dict[int, tuple[Any, list[int] | None, dict[int, int]]]

_RANGE_GAP = 1 << 20  # wanted samples closer than this in a shard are read by one GET
_RANGE_GETS = 32  # ranged GETs at a time per batch
# Parquet pages closer than this share a GET: pages are large, and a column's dictionary page
# is far from the data page of a late row (a wide gap would fetch most of the group)
_PAGE_GAP = 64 << 10


class RangeReads(EngineBase):
    """The range-read policy of an engine and its I/O."""

    def _may_range(self) -> bool:
        """Whether this iteration may read a shard by ranges at all (see :meth:`_range_wants`):
        some stream has a remote and a shard of at least ``range_min_bytes``. Only then are its
        downloads held for the first batch's ranges; otherwise holding them would only change
        when they start."""
        if not self.range_first_batches:
            return False
        cat = self.catalog
        for i, src in enumerate(cat.sources):
            first, end = int(cat.shard_first[i]), int(cat.shard_first[i + 1])
            if (
                end > first
                and cat.shards[first].remote is not None
                and int(src.index.table.raw_bytes.max()) >= self.range_min_bytes
            ):
                return True
        return False

    def _range_wants(self, groups: Groups, la: Lookahead, opener: ShardOpener) -> Wants:
        """The shards of this batch to read by ranges, with their wanted samples: only in the
        first ``range_first_batches`` batches of an iteration (each worker's; a resumed one
        starts again), and only shards :meth:`_rangeable` and not open here."""
        if la.batches_taken > self.range_first_batches:
            return []
        wants = [
            (s, list(locals_))
            for s, _positions, locals_ in groups
            if opener.cached(s) is None and self._rangeable(s)
        ]
        return wants if self._ranges_pay(wants) else []

    def _ranges_pay(self, wants: Wants) -> bool:
        """Whether reading ``wants`` by ranges saves enough bytes before the batch: the MDS
        shards' ranges (wanted samples, neighbours under ``_RANGE_GAP`` apart in one GET, as
        :meth:`_range_read` reads them) at most ``range_share`` of those shards' bytes. Else
        the ranges would cost about what the whole shards cost, which their downloads then
        read again: the batch waits for the downloads instead. Estimated from the index alone
        (the same answer in every process, no GET): a shard's bytes spread evenly over its
        samples. Parquet row groups have their own rule (``page_share``), on the fetched
        offset indexes."""
        entries = self.catalog.entries
        ranged = whole = 0.0
        for s, locals_ in wants:
            entry = entries[s]
            n = entry.samples
            if entry.format != "mds" or n <= 0:
                continue
            head = header_size(n)
            each = (entry.raw_data.bytes - head) / n
            # runs of wanted samples, a new one wherever the gap to the previous is at least
            # _RANGE_GAP bytes; vectorised: a first batch may want tens of thousands of samples
            # here, on the caller's event loop in aiter
            want = np.unique(np.asarray(locals_, np.int64))
            cut = np.flatnonzero((np.diff(want) - 1) * each >= _RANGE_GAP)
            starts = want[np.concatenate(([0], cut + 1))]
            ends = want[np.concatenate((cut, [len(want) - 1]))]
            ranged += int((ends + 1 - starts).sum()) * each
            ranged += head  # its header, read first
            whole += entry.raw_data.bytes
        return ranged <= self.range_share * whole

    def _rangeable(self, s: int) -> bool:
        """Whether shard ``s`` may be read by ranges now: at least ``range_min_bytes`` (1 MiB),
        not complete in the cache, and its samples can be addressed and trusted without the
        whole file: an uncompressed MDS shard with a remote, read without hash validation (a
        range cannot be checked against a whole-file hash, so a validating stream always waits
        for its shards). A Parquet row group qualifies when its file has a page index for
        every projected column (``parquet/io_pages.py``: its rows are read by pages)."""
        shard = self.catalog.shards[s]
        entry = self.catalog.entries[s]
        if entry.format == "parquet":
            return not (
                shard.remote is None
                or (shard.validate_hash or self.validate_hash) is not None
                or shard.files.raw_size < self.range_min_bytes
                or _page_layout(entry) is None
                or is_complete(shard.files.raw_path, shard.files.raw_size)
            )
        return not (
            shard.remote is None
            or shard.compression is not None
            or shard.ranges is not None
            or shard.meta is not None
            or entry.format != "mds"
            or (shard.validate_hash or self.validate_hash) is not None
            or shard.files.raw_size < self.range_min_bytes
            or is_complete(shard.files.raw_path, shard.files.raw_size)
        )

    async def _range_batch(self, wants: Wants) -> dict[int, RangeShard]:
        """Read the wanted samples of each shard by ranged GETs, all shards at once: the
        header of a shard once per process, then its wanted samples coalesced into few ranges
        (neighbours less than ``_RANGE_GAP`` bytes apart share a GET), at most
        ``_RANGE_GETS`` GETs at a time. The whole-shard downloads go on meanwhile."""
        parts = self._parts()
        got = await self._range_read(wants, asyncio.Semaphore(_RANGE_GETS))
        out = self._range_shards(parts, got)
        parts.range_samples += sum(len(r.slot) for r in out.values())
        return out

    def _range_shards(self, parts: ProcessParts, got: dict[int, Any]) -> dict[int, Any]:
        """The range shards of :meth:`_range_read`'s bytes: an MDS shard's samples as they are,
        a Parquet row group's pages decoded (a group whose pages do not decode on their own is
        left out: it is read whole, by the path that checks it)."""
        out: dict[int, Any] = {}
        for s, (buf, compact, slot) in got.items():
            if compact is not None:
                out[s] = RangeShard(buf, compact, slot, parts.random.decoder(s))
                continue
            from astream.parquet.io_pages import PageRows, decode_rows

            entry = self.catalog.entries[s]
            table = decode_rows(entry, buf, sorted(slot))  # type: ignore[arg-type]
            if table is not None:
                out[s] = PageRows(entry, table, slot)  # type: ignore[arg-type]
        return out

    async def _range_read(
        self,
        wants: Wants,
        sem: asyncio.Semaphore,
        live: list[bool] | None = None,
        answered: Callable[[], None] | None = None,
    ) -> Read:
        """:meth:`_range_batch`'s reads, under ``sem``: per shard, the wanted samples back to
        back, their offsets in that buffer, and each sample's slot (``live``: see
        ``FirstBatch.lead_first``; ``answered`` is called as each GET's bytes are in)."""
        return await _RangeRead(self, sem, live, answered).run(wants)

    async def _range_offsets(self, parts: ProcessParts, s: int) -> tuple[Sequence[int], int]:
        """Shard ``s``'s sample offsets, read by range the first time (then kept for the
        process; concurrent first calls share one read), and the bytes that cost now."""
        offsets = parts.headers.get(s)
        if offsets is not None:
            return offsets, 0
        pending = parts.header_reads.get(s)
        if pending is not None and pending.get_loop() is asyncio.get_running_loop():
            return await asyncio.shield(pending), 0
        task = asyncio.ensure_future(self._read_offsets(parts, s))
        parts.header_reads[s] = task
        task.add_done_callback(lambda t: _forget_read(parts.header_reads, s, t))
        return await asyncio.shield(task), header_size(self.catalog.entries[s].samples)

    async def _read_offsets(self, parts: ProcessParts, s: int) -> Sequence[int]:
        shard = self.catalog.shards[s]
        entry = self.catalog.entries[s]
        assert shard.remote is not None
        store = self.stores.get(shard.remote)
        meta = shard.meta  # a split shard's offsets live in its meta file
        head_key = shard.raw_key if meta is None else meta.raw_key
        etag = shard.etag if meta is None else meta.etag
        n = header_size(entry.samples)
        head = await parts.fetcher.versions.read(store, shard.remote, head_key, 0, n, etag)
        parts.stats.range_requests += 1
        parts.stats.add_bytes(shard.remote, len(head))
        first = None if meta is None else 0  # split offsets index the data file from 0
        offsets: tuple[int, ...] = tuple(  # as ShardView's: the GC stops scanning a tuple
            parse_offsets(
                head, shard.url(), entry.samples, entry.raw_data.bytes, min_first=first
            ).tolist()
        )
        parts.headers[s] = offsets
        return offsets


class _RangeRead:
    """One :meth:`RangeReads._range_read`: its GETs share ``sem``, and a Parquet file's offset
    indexes are fetched once for all its row groups."""

    def __init__(
        self,
        engine: RangeReads,
        sem: asyncio.Semaphore,
        live: list[bool] | None,
        answered: Callable[[], None] | None,
    ) -> None:
        self.engine = engine
        self.parts = engine._parts()
        self.sem = sem
        self.live = live
        self.answered = answered
        self.indexes: dict[tuple[str, tuple[int, int]], Any] = {}  # a file's offset indexes

    async def run(self, wants: Wants) -> Read:
        cat = self.engine.catalog
        pq = [(s, locals_) for s, locals_ in wants if cat.entries[s].format == "parquet"]
        plans = await asyncio.gather(*(self.page_plan(s, locals_) for s, locals_ in pq))
        if any(p is None for p in plans):
            # a row group of the batch is read whole: the batch waits for its download, which
            # page reads of the others would only delay (downloads are held meanwhile)
            plans = [None] * len(plans)
        plan_of = {s: p for (s, _), p in zip(pq, plans)}
        shards = await asyncio.gather(
            *(
                self.pages(s, locals_, plan_of[s]) if s in plan_of else self.one(s, locals_)
                for s, locals_ in wants
            )
        )
        return {s: r for (s, _), r in zip(wants, shards)}

    def check(self) -> None:
        if self.live is not None and not self.live[0]:
            raise _IterationOver

    async def get(self, store: Any, shard: RemoteShard, a: int, b: int) -> bytes:
        """Bytes ``[a, b)`` of ``shard``'s object, conditional on its indexed identity (a
        Parquet file's: a rewritten file is an ObjectChangedError, as for whole reads,
        never its new pages decoded with the old footer), or for an MDS shard on the
        version this process read first (``runtime/versions.py``)."""
        key, remote = shard.raw_key, shard.remote
        assert remote is not None
        async with self.sem:
            self.check()
            # an iteration's first samples: their shard's file is compared once it is in
            # the cache (Versions.sweep); a random read's (aget_range) only if opened
            cached = (shard.files.raw_path, shard.files.raw_size)
            versions = self.parts.fetcher.versions
            data = await versions.read(store, remote, key, a, b, shard.etag, cached)
        self.parts.stats.range_requests += 1
        self.parts.stats.add_bytes(remote, len(data))
        if self.answered is not None:
            self.answered()
        if len(data) != b - a:
            raise FormatError(f"range {a}-{b} came back with {len(data)} bytes", key)
        return data

    async def page_plan(self, s: int, locals_: list[int]) -> tuple[Any, list[Any]] | None:
        """A Parquet row group's offset indexes (fetched) and the GETs of the pages holding
        ``locals_``; None when those pages are over ``page_share`` of the group (they would
        cost about the whole group, then the group again: its download starts after the
        first batches) or the index does not parse."""
        from astream.parquet import io_pages as parquet_range

        shard = self.engine.catalog.shards[s]
        entry: Any = self.engine.catalog.entries[s]
        assert shard.remote is not None
        store = self.engine.stores.get(shard.remote)
        span = parquet_range.index_span(entry)
        assert span is not None  # _rangeable
        kept = parquet_range.kept_index(shard.url(), entry, span)
        if kept is None:
            key = (shard.raw_key, span)
            task = self.indexes.get(key)
            if task is None:
                task = asyncio.ensure_future(self.get(store, shard, *span))
                self.indexes[key] = task
            fetched: bytes = await asyncio.shield(task)
            parquet_range.keep_index(shard.url(), entry, span, fetched)
            kept = fetched
        got: dict[tuple[int, int], bytes] = {span: kept}
        ranges = parquet_range.page_ranges(entry, got, sorted(set(locals_)))
        if ranges is None or sum(b - a for a, b in ranges) > (
            shard.files.raw_size * self.engine.page_share
        ):
            return None
        runs: list[tuple[int, int]] = []
        spans = entry.ranges()  # the projected chunks, merged: a GET never leaves one
        for a, b in ranges:  # sorted: neighbours closer than _PAGE_GAP share a GET
            if runs and a - runs[-1][1] < _PAGE_GAP and _within(spans, runs[-1][0], b):
                runs[-1] = (runs[-1][0], max(b, runs[-1][1]))
            else:
                runs.append((a, b))
        return got, runs

    async def pages(
        self, s: int, locals_: list[int], plan: tuple[Any, list[Any]] | None
    ) -> tuple[Any, None, dict[int, int]]:
        """A Parquet row group's wanted rows: its planned pages (none: read it whole)."""
        if plan is None:
            return {}, None, {}
        shard = self.engine.catalog.shards[s]
        assert shard.remote is not None
        store = self.engine.stores.get(shard.remote)
        got, runs = plan
        pieces = await asyncio.gather(*(self.get(store, shard, a, b) for a, b in runs))
        got.update(zip(runs, pieces))
        return got, None, {li: j for j, li in enumerate(sorted(set(locals_)))}

    async def one(self, s: int, locals_: list[int]) -> tuple[Any, list[int] | None, dict[int, int]]:
        """An MDS shard's wanted samples, back to back, read after its header."""
        shard = self.engine.catalog.shards[s]
        assert shard.remote is not None
        store = self.engine.stores.get(shard.remote)
        async with self.sem:
            self.check()
            offsets, _ = await self.engine._range_offsets(self.parts, s)
        if self.answered is not None:
            self.answered()
        want = sorted(set(locals_))
        runs: list[tuple[int, int]] = []  # [first, last] index into ``want``, inclusive
        first = 0
        for k in range(1, len(want) + 1):
            if k == len(want) or offsets[want[k]] - offsets[want[k - 1] + 1] >= _RANGE_GAP:
                runs.append((first, k - 1))
                first = k
        pieces = await asyncio.gather(
            *(self.get(store, shard, offsets[want[a]], offsets[want[b] + 1]) for a, b in runs)
        )
        chunks: list[memoryview] = []
        compact = [0]
        for (a, b), piece in zip(runs, pieces):
            mv = memoryview(piece)
            base = offsets[want[a]]
            for li in want[a : b + 1]:
                chunks.append(mv[offsets[li] - base : offsets[li + 1] - base])
                compact.append(compact[-1] + offsets[li + 1] - offsets[li])
        slot = {li: j for j, li in enumerate(want)}
        return b"".join(chunks), compact, slot


def _within(spans: tuple[tuple[int, int], ...], a: int, b: int) -> bool:
    return any(s <= a and b <= e for s, e in spans)


def _page_layout(entry: Any) -> Any:
    from astream.parquet.io_pages import layout_of

    return layout_of(entry)


class _IterationOver(Exception):
    """The loader's iteration ended while its workers' first batches were being read."""


def _forget_read(reads: dict[int, Any], s: int, task: Any) -> None:
    if reads.get(s) is task:
        del reads[s]
    if not task.cancelled():
        task.exception()  # retrieved here: a failed read raises in each caller instead
