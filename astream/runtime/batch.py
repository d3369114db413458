"""Planned batches as columns: the runtime side of :mod:`astream.core.batchdecode`.

Theory of operation
-------------------
The engine groups a planned batch's ids by shard (``reader.batch_groups``) and opens each
shard once. :func:`locate_batch` hands each open shard's mapped bytes and offsets to a
:class:`~astream.core.batchdecode.ColumnBatch` (phase 1: where every column lies); the caller
then ``finish``\\es it with an allocator (phase 2: one array per column, filled by one copy per
column and shard group). The allocator decides where the batch lives: private numpy memory in
the consumer, or a DataLoader worker's shared-memory slot (``astream/torch/shm.py``).

Only MDS shards batch this way; a batch that reaches a JSON/CSV/XSV shard, or mixes shards
whose columns differ, is refused with a ``ConfigError`` saying so (iterate samples instead).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from astream.core.batchdecode import ColumnBatch, ColumnSpec, column_specs
from astream.errors import ConfigError
from astream.runtime.catalog import Catalog
from astream.runtime.reader import Groups, OpenShard

__all__ = ["BatchLayouts", "locate_batch"]


class BatchLayouts:
    """Column specs per shard layout, built once per process."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self._by_key: dict[tuple[Any, ...], list[ColumnSpec]] = {}

    def specs(self, s: int) -> tuple[tuple[Any, ...], list[ColumnSpec]]:
        e = self.catalog.entries[s]
        if e.format != "mds":
            raise ConfigError(
                f"batch output reads MDS shards only; {self.catalog.shards[s].url()} is "
                f"{e.format!r} (iterate samples for this stream)"
            )
        key = (tuple(e.column_names), tuple(e.column_encodings), tuple(e.column_sizes))
        specs = self._by_key.get(key)
        if specs is None:
            specs = column_specs(e.column_names, e.column_encodings, e.column_sizes)
            self._by_key[key] = specs
        return key, specs


def locate_batch(
    groups: Groups,
    size: int,
    open_shard: Callable[[int], OpenShard],
    layouts: BatchLayouts,
    ragged: str,
) -> ColumnBatch:
    """Phase 1 of a batch: every group located in its (open) shard."""
    batch: ColumnBatch | None = None
    first: tuple[Any, ...] | None = None
    for s, positions, locals_ in groups:
        key, specs = layouts.specs(s)
        if batch is None:
            batch, first = ColumnBatch(specs, size, ragged), key
        elif key != first:
            raise ConfigError(
                "batch output needs one column layout per batch; this batch mixes shards with "
                f"columns {list(first[0]) if first else []} and {list(key[0])} "
                "(iterate samples, or mix streams with the same columns)"
            )
        buf, offsets = open_shard(s).arrays()
        batch.add(
            buf,
            offsets,
            np.asarray(positions, np.int64),
            np.asarray(locals_, np.int64),
            layouts.catalog.shards[s].url(),
        )
    if batch is None:
        batch = ColumnBatch([], size, ragged)
    return batch
