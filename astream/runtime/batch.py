"""Planned batches as columns: the runtime side of :mod:`astream.core.batchdecode`.

Theory of operation
-------------------
The engine groups a planned batch's ids by shard (``batch_groups.batch_groups``) and opens each
shard once. :func:`locate_batch` looks each group's samples up in the per-process
:class:`~astream.core.row_store.RowStore` of its layout (a shard's table is built the first
time a batch touches it), which turns the whole batch into one array of row numbers plus the
mapped shard each row reads: that is the located
:class:`~astream.core.batchdecode.ColumnBatch`. The caller then ``finish``\\es it with an
allocator (one array per column: a ``take`` per scalar column, one offsets-driven copy per
other column). The allocator decides where the batch lives: private numpy memory in the
consumer, or a DataLoader worker's shared-memory slot (``astream/torch/shm.py``).

A batch holding a sample that fails the format checks raises what the sample-by-sample checks
raise (``check_group``, run only then). MDS shards and Parquet row groups batch this way; a
batch that reaches a JSON/CSV/XSV shard, or mixes shards whose columns batch differently, is
refused with a ``ConfigError`` saying so (iterate samples instead).

A Parquet row group (``parquet.io_rowgroup.RowGroupHandle``) is located in its decoded Arrow IPC
image -- the node's mapped decoded file, or a private buffer -- which holds every column's
values and offsets in one buffer, so its table (``parquet.batches.row_group_table``: each
value's start and length in that image) feeds the same row store and the same copies as an
MDS shard's. A row holding a null is flagged, and a batch that holds one is refused with a
``ConfigError`` naming the column (``parquet.batches.null_error``): batches have no null
form.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from astream.core.batch_copy import PREAD
from astream.core.batch_layout import ColumnSpec, Layout, column_specs
from astream.core.batchdecode import ColumnBatch
from astream.core.row_store import RowStore
from astream.core.sample_table import check_group, sample_table
from astream.errors import ConfigError
from astream.runtime.batch_groups import BatchGroups, Groups
from astream.runtime.catalog import Catalog
from astream.runtime.shard_handles import OpenShard

__all__ = ["BatchLayouts", "locate_batch"]


class BatchLayouts:
    """The row store of each shard layout, built once per iteration of a process."""

    def __init__(self, catalog: Catalog, max_shards: int = 64) -> None:
        self.catalog = catalog
        self.max_shards = max_shards
        self._by_key: dict[tuple[Any, ...], RowStore] = {}
        self._by_shard: dict[int, tuple[tuple[Any, ...], RowStore]] = {}
        self.row_groups: set[int] = set()  # the Parquet shards among those seen by store()
        self._mds_orders: dict[tuple[Any, ...], list[str]] | None = None

    def _in_mds_order(self, specs: list[ColumnSpec]) -> list[ColumnSpec]:
        """A Parquet row group's specs in the column order of an MDS layout of the dataset
        that batches alike, if there is one (MDS writers sort columns by name, a Parquet
        projection keeps the file's order): then both share one row store, so a batch may mix
        them. A row group's table is built by column name, so any order serves it."""
        if self._mds_orders is None:
            self._mds_orders = {}
            seen: set[tuple[Any, ...]] = set()
            for e in self.catalog.entries:
                if e.format != "mds":
                    continue
                sig = (tuple(e.column_names), tuple(e.column_encodings), tuple(e.column_sizes))
                if sig in seen:
                    continue
                seen.add(sig)
                try:
                    mds = column_specs(e.column_names, e.column_encodings, e.column_sizes)
                except (ConfigError, ValueError, TypeError, KeyError):
                    continue  # not batchable: the batch that reaches it says so
                self._mds_orders.setdefault(_unordered(mds), list(e.column_names))
        order = self._mds_orders.get(_unordered(specs))
        if order is None:
            return specs
        by_name = {c.name: c for c in specs}
        out, nvar = [], 0
        for name in order:
            c = by_name[name]
            if c.var_index >= 0:
                c.var_index = nvar
                nvar += 1
            out.append(c)
        return out

    def store(self, s: int) -> tuple[tuple[Any, ...], RowStore]:
        got = self._by_shard.get(s)
        if got is not None:
            return got
        e = self.catalog.entries[s]
        if e.format == "parquet":
            specs = self._in_mds_order(_parquet_specs(e, self.catalog.shards[s].url()))
            self.row_groups.add(s)
        elif e.format != "mds":
            raise ConfigError(
                f"batch output reads MDS shards only (and Parquet row groups); "
                f"{self.catalog.shards[s].url()} is {e.format!r} (iterate samples for this "
                "stream)"
            )
        else:
            specs = column_specs(e.column_names, e.column_encodings, e.column_sizes)
        key = _layout_key(specs)
        store = self._by_key.get(key)
        if store is None:
            store = self._by_key[key] = RowStore(Layout(specs), self.max_shards)
        self._by_shard[s] = got = (key, store)
        return got


def _parquet_specs(entry: Any, source: str) -> list[ColumnSpec]:
    from astream.parquet.batches import batch_specs

    return batch_specs(entry, source)


def _layout_key(specs: list[ColumnSpec]) -> tuple[Any, ...]:
    """What makes two shard layouts batch alike (one row store): per column, its name, how it
    is laid out and its output dtype. So ``int`` and ``int64`` (both 8-byte integers), and an
    MDS column and a Parquet column that batch to the same arrays, share a store; a column
    batched as stored bytes keeps its encoding (``json`` bytes are not ``bytes``)."""
    return tuple(
        (c.name, c.kind, None if c.dtype is None else c.dtype.str, c.shape, c.size, c.var_index,
         c.encoding if c.kind == "bytes" else "")
        for c in specs
    )  # fmt: skip


def _unordered(specs: list[ColumnSpec]) -> tuple[Any, ...]:
    """:func:`_layout_key` without the column order."""
    return tuple(sorted((k[:5] + k[6:] for k in _layout_key(specs)), key=repr))


def locate_batch(
    groups: Groups,
    size: int,
    open_shard: Callable[[int], OpenShard],
    layouts: BatchLayouts,
    ragged: str,
) -> ColumnBatch:
    """Phase 1 of a batch: every group located in its (open) shard's table."""
    if not groups:
        return ColumnBatch(None, size, ragged)
    first, store = layouts.store(groups[0][0])
    store.next_batch()
    pq = False
    bufs: list[Any] = []
    files: list[OpenShard] = []
    bases: list[int] = []
    by_shard, row_groups = layouts._by_shard, layouts.row_groups
    held, used, tick = store.base, store.used, store.tick  # store.base_of, inlined
    for s, _positions, _locals in groups:
        key, st = by_shard.get(s) or layouts.store(s)
        if st is not store:
            raise ConfigError(
                "batch output needs one column layout per batch; this batch mixes shards with "
                f"columns {[c[0] for c in first]} and {[c[0] for c in key]} "
                "(iterate samples, or mix streams with the same columns)"
            )
        h = open_shard(s)
        if s in row_groups:  # a Parquet row group: its decoded image
            buf, base = _locate_row_group(h, s, store, layouts)
            pq = True
        else:
            buf = h.buffer()
            known = held.get(s)
            if known is not None:
                base = known
                used[s] = tick
            else:
                base = _add_table(h, s, buf, store)
        bufs.append(buf)
        files.append(h)
        bases.append(base)
    which: list[int] | None = None
    local = groups.local if isinstance(groups, BatchGroups) else None
    if len(groups) == 1:
        rows = (np.asarray(groups[0][2], np.int64) if local is None else local) + bases[0]
    elif local is not None and isinstance(groups, BatchGroups) and groups.which is not None:
        # batch_groups' arrays: no walk over the samples in Python
        rows = np.asarray(bases, np.int64)[groups.which] + local
        which = groups.which.tolist()
    else:
        flat = [0] * size
        which = [0] * size
        for g, (_s, positions, locals_) in enumerate(groups):
            b = bases[g]
            for j, li in zip(positions, locals_):
                flat[j] = b + li
                which[j] = g
        rows = np.array(flat, np.int64)
    if store.nbad and bool(store.bad[rows].any()):
        for g, (s, _positions, locals_) in enumerate(groups):
            if layouts.catalog.entries[s].format == "parquet":
                _null_check(files[g], s, store, list(locals_), layouts)
                continue
            check_group(
                store.layout,
                bufs[g],
                open_shard(s).offsets_array(),
                np.asarray(locals_, np.int64),
                layouts.catalog.shards[s].url(),
            )
        raise AssertionError("a flagged sample passed its checks")  # pragma: no cover
    if pq and not all(getattr(h, "has_file", lambda: True)() for h in files):
        files = []  # a row group decoded in memory: values are copied from the buffers
    copied = [getattr(h, "by_copy", False) for h in files]
    cb = ColumnBatch(store, size, ragged, rows, which, bufs, files, copied)
    if isinstance(groups, BatchGroups) and groups.chunk is not None:
        cb.chunk, cb.span = groups.chunk, groups.span
    return cb


def _add_table(h: OpenShard, s: int, buf: Any, store: RowStore) -> int:
    """Build MDS shard ``s``'s table in ``store`` (its base row), reading every sample's
    header through the map; then unmap those pages when the values are read with ``preadv``
    (large values, or a shard read by copy)."""
    offsets = h.offsets_array()
    base = store.add(s, sample_table(store.layout, buf, offsets))
    copy = getattr(h, "by_copy", False)  # a RangeShard is never read by copy
    if copy or (len(offsets) > 1 and offsets[-1] - offsets[0] >= PREAD * (len(offsets) - 1)):
        h.drop_pages()  # values read with preadv: no need for the map
    return base


def _locate_row_group(h: Any, s: int, store: RowStore, layouts: BatchLayouts) -> tuple[Any, int]:
    """A Parquet row group's buffer (its decoded IPC image as uint8) and base row in
    ``store`` (its table built the first time)."""
    from astream.parquet.batches import row_group_table

    entry = layouts.catalog.entries[s]
    ipc, _table = h.columnar(entry)  # type: ignore[arg-type]
    buf = np.frombuffer(ipc, np.uint8)
    base = store.base_of(s)
    if base is None:
        base = store.add(s, row_group_table(h, entry, store.layout))  # type: ignore[arg-type]
    return buf, base


def _null_check(h: Any, s: int, store: RowStore, locals_: list[int], layouts: BatchLayouts) -> None:
    """Raise for the flagged rows (nulls) of row group ``s`` among ``locals_``, if any."""
    from astream.parquet.batches import null_error

    base = store.base_of(s)
    assert base is not None
    flagged = [i for i in locals_ if store.bad[base + i]]
    if flagged:
        entry = layouts.catalog.entries[s]
        url = layouts.catalog.shards[s].url()
        raise null_error(h, entry, flagged, url)  # type: ignore[arg-type]
