"""Planned batches as columns: the runtime side of :mod:`astream.core.batchdecode`.

Theory of operation
-------------------
The engine groups a planned batch's ids by shard (``reader.batch_groups``) and opens each
shard once. :func:`locate_batch` looks each group's samples up in the per-process
:class:`~astream.core.batchdecode.RowStore` of its layout (a shard's table is built the first
time a batch touches it), which turns the whole batch into one array of row numbers plus the
mapped shard each row reads: that is the located
:class:`~astream.core.batchdecode.ColumnBatch`. The caller then ``finish``\\es it with an
allocator (one array per column: a ``take`` per scalar column, one offsets-driven copy per
other column). The allocator decides where the batch lives: private numpy memory in the
consumer, or a DataLoader worker's shared-memory slot (``astream/torch/shm.py``).

A batch holding a sample that fails the format checks raises what the sample-by-sample checks
raise (``check_group``, run only then). Only MDS shards batch this way; a batch that reaches a
JSON/CSV/XSV shard, or mixes shards whose columns differ, is refused with a ``ConfigError``
saying so (iterate samples instead).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from astream.core.batchdecode import (
    PREAD,
    ColumnBatch,
    Layout,
    RowStore,
    check_group,
    column_specs,
    shard_table,
)
from astream.errors import ConfigError
from astream.runtime.catalog import Catalog
from astream.runtime.reader import BatchGroups, Groups, OpenShard

__all__ = ["BatchLayouts", "locate_batch"]


class BatchLayouts:
    """The row store of each shard layout, built once per iteration of a process."""

    def __init__(self, catalog: Catalog, max_shards: int = 64) -> None:
        self.catalog = catalog
        self.max_shards = max_shards
        self._by_key: dict[tuple[Any, ...], RowStore] = {}
        self._by_shard: dict[int, tuple[tuple[Any, ...], RowStore]] = {}

    def store(self, s: int) -> tuple[tuple[Any, ...], RowStore]:
        got = self._by_shard.get(s)
        if got is not None:
            return got
        e = self.catalog.entries[s]
        if e.format != "mds":
            raise ConfigError(
                f"batch output reads MDS shards only; {self.catalog.shards[s].url()} is "
                f"{e.format!r} (iterate samples for this stream)"
            )
        key = (tuple(e.column_names), tuple(e.column_encodings), tuple(e.column_sizes))
        store = self._by_key.get(key)
        if store is None:
            specs = column_specs(e.column_names, e.column_encodings, e.column_sizes)
            store = self._by_key[key] = RowStore(Layout(specs), self.max_shards)
        self._by_shard[s] = got = (key, store)
        return got


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
    bufs: list[Any] = []
    files: list[OpenShard] = []
    bases: list[int] = []
    for s, _positions, _locals in groups:
        key, st = layouts.store(s)
        if st is not store:
            raise ConfigError(
                "batch output needs one column layout per batch; this batch mixes shards with "
                f"columns {list(first[0])} and {list(key[0])} "
                "(iterate samples, or mix streams with the same columns)"
            )
        h = open_shard(s)
        buf = h.buffer()
        base = store.base_of(s)
        if base is None:
            offsets = h.offsets_array()
            base = store.add(s, shard_table(store.layout, buf, offsets))
            if len(offsets) > 1 and offsets[-1] - offsets[0] >= PREAD * (len(offsets) - 1):
                h.drop_pages()  # large values are read with preadv: no need to keep the map
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
            check_group(
                store.layout,
                bufs[g],
                open_shard(s).offsets_array(),
                np.asarray(locals_, np.int64),
                layouts.catalog.shards[s].url(),
            )
        raise AssertionError("a flagged sample passed its checks")  # pragma: no cover
    return ColumnBatch(store, size, ragged, rows, which, bufs, files)
