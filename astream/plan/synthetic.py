"""A synthetic index, built in memory: for planning "what if" datasets and the planner's scale
tests.

May import: core, errors.
"""

from __future__ import annotations

import json

import numpy as np

from astream.core.index import Index
from astream.errors import ConfigError

__all__ = ["synthetic_index"]


def synthetic_index(
    samples: int, shards: int, shard_bytes: int | None = None, *, bytes_per_sample: int = 1024
) -> Index:
    """An index of ``shards`` shards holding ``samples`` samples in all (as even as possible),
    built in memory (no file; for planning "what if" datasets and the planner's scale tests).
    Each shard takes ``shard_bytes`` (default: its samples x ``bytes_per_sample``)."""
    from astream.core.index import parse_index
    from astream.core.shard_table import ShardTable

    if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
        raise ConfigError(f"shards must be an int >= 1, got {shards!r}")
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < shards:
        raise ConfigError(f"samples must be an int >= shards ({shards}), got {samples!r}")
    q, r = divmod(samples, shards)
    counts = np.full(shards, q, np.int64)
    counts[:r] += 1
    size = counts * bytes_per_sample if shard_bytes is None else np.full(shards, shard_bytes)
    one = {
        "column_encodings": ["bytes"], "column_names": ["x"], "column_sizes": [None],
        "compression": None, "format": "mds", "hashes": [], "samples": int(counts[0]),
        "size_limit": 1 << 26, "version": 2, "zip_data": None,
        "raw_data": {"basename": "shard.00000.mds", "bytes": int(size[0]), "hashes": {}},
    }  # fmt: skip
    template = parse_index(
        json.dumps({"version": 2, "shards": [one]}).encode(), "synthetic"
    ).shards[0]
    table = ShardTable(
        templates=[template],
        kind=np.zeros(shards, np.int32),
        samples=counts,
        raw_names=[f"shard.{i:05}.mds" for i in range(shards)],
        raw_bytes=np.asarray(size, np.int64),
        raw_hashes=[{}] * shards,
    )
    return Index(table)
