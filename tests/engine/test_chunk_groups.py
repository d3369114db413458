"""Planned batches grouped by shard a chunk at a time (``batch_groups.chunk_groups``, read by
``prefetch.Lookahead``) equal the per-batch grouping (``batch_groups.batch_groups``) exactly: the
lists the decoders walk, and the ``local``/``which`` arrays the columnar path reads."""

from __future__ import annotations

from typing import Any

import numpy as np

from astream.runtime.batch_groups import BatchGroups, batch_groups, chunk_groups
from astream.runtime.prefetch import Lookahead


class _Catalog:
    """Just what grouping reads: sample id -> (shard, index in shard)."""

    def __init__(self, counts: Any) -> None:
        self.starts = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)

    def locate(self, ids: Any) -> Any:
        shard = np.searchsorted(self.starts, ids, side="right") - 1
        return shard, ids - self.starts[shard]


def _same(got: BatchGroups, want: BatchGroups) -> None:
    assert list(got) == list(want)
    for name in ("local", "which"):
        a, b = getattr(got, name), getattr(want, name)
        assert (a is None) == (b is None), name
        if a is not None:
            assert a.dtype == np.int64 and np.array_equal(a, b), name


def _chunk(rng: np.random.Generator, n: int) -> list[Any]:
    kind = rng.integers(0, 3)
    out = []
    for _ in range(int(rng.integers(1, 9))):
        size = int(rng.integers(0, 24))
        if kind == 0:  # any ids
            out.append(rng.integers(0, n, size))
        elif kind == 1:  # one shard per batch (single group: which is None)
            out.append(np.full(size, int(rng.integers(0, n))))
        else:  # runs of neighbours, as an unshuffled plan gives
            a = int(rng.integers(0, n))
            out.append(np.arange(a, min(n, a + size)))
    return [b.astype(np.int64) for b in out]


def test_chunk_groups_equal_batch_groups() -> None:
    rng = np.random.default_rng(11)
    for _ in range(1500):
        cat = _Catalog(rng.integers(1, 40, int(rng.integers(1, 14))))
        chunk = _chunk(rng, int(cat.starts[-1]))
        got = chunk_groups(chunk, cat)  # type: ignore[arg-type]
        assert len(got) == len(chunk)
        for b, g in zip(chunk, got):
            _same(g, batch_groups(b, cat))  # type: ignore[arg-type]


class _Prefetch:
    def __init__(self) -> None:
        self.wanted: list[int] = []

    def want(self, s: int) -> None:
        self.wanted.append(s)


def test_lookahead_yields_and_announces_as_per_batch() -> None:
    """Through the Lookahead: the same batches in order, and the shards announced in the same
    order and no earlier in the epoch than with one grouping per batch."""
    rng = np.random.default_rng(4)
    cat = _Catalog(rng.integers(50, 200, 30))
    n = int(cat.starts[-1])
    batches = [rng.integers(0, n, 32).astype(np.int64) for _ in range(300)]
    pf = _Prefetch()
    la = Lookahead(iter(batches), cat, pf, ahead=500)  # type: ignore[arg-type]
    seen: set[int] = set()
    for k, (groups, size) in enumerate(la):
        assert size == 32
        _same(groups, batch_groups(batches[k], cat))  # type: ignore[arg-type,arg-type]
        # nothing announced belongs to a batch past the window (ahead=500 samples)
        window = batches[k : k + 500 // 32 + 2]
        allowed = seen | {int(s) for b in window for s in cat.locate(b)[0]}
        assert set(pf.wanted) <= allowed
        seen |= {int(s) for s in cat.locate(batches[k])[0]}
    first_use = list(dict.fromkeys(int(s) for b in batches for s in cat.locate(b)[0]))
    assert pf.wanted == first_use
