"""The replay's pins over the workers' concurrent batches (``CacheReplay(hold=...)``) and the
opening of the time model (every worker's first downloads share the link)."""

from __future__ import annotations

import numpy as np
import pytest

from astream.core.cachesim import CacheReplay
from astream.plan import PIN_WAITS, simulate_index, synthetic_index
from astream.plan.timing import timeline as _timeline

ONES = np.ones(4, np.int64)  # shards 0..3 of 1 byte each


def _run(ticks: list[int], shards: list[int], limit: int, hold: int) -> tuple[int, int, int]:
    rep = CacheReplay(ONES, limit, "next_use", hold).epoch(
        np.array(ticks, np.int64), np.array(shards, np.int64), max(ticks) + 1
    )
    return rep.downloads, rep.evictions, rep.waits


def test_a_held_shard_is_not_the_victim() -> None:
    # A at 0, B at 1, C at 2, A again at 3; room for 2. Without a hold, C's download evicts B
    # (never read again); with B held by the read at tick 1, A must go and comes back.
    reads = ([0, 1, 2, 3], [0, 1, 2, 0])
    assert _run(*reads, limit=2, hold=0) == (3, 1, 0)
    assert _run(*reads, limit=2, hold=1) == (4, 2, 0)


def test_only_held_shards_left_waits_for_the_oldest() -> None:
    # room for 1: B's download finds only A, held by the read at tick 0: the consumer waits
    # for it, then A is evicted (counted in waits) and the cache stays within the limit
    rep = CacheReplay(ONES, 1, "next_use", 2)
    out = rep.epoch(np.array([0, 1, 2]), np.array([0, 1, 2]), 3)
    assert (out.downloads, out.evictions, out.waits, out.overcommit) == (3, 2, 2, 0)
    assert out.high_water == 1


def test_hold_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="hold must be >= 0"):
        CacheReplay(ONES, 1, "next_use", -1)


def test_plan_notes_waits_for_pins_with_two_workers() -> None:
    index = synthetic_index(2_000, 40, 1_000)
    args = dict(batch_size=8, ranks_per_node=2, cache_limit=3_000, shuffles=["astream"],
                shuffle_block_size=200)  # fmt: skip
    (one,) = simulate_index(index, workers=1, **args)
    (two,) = simulate_index(index, workers=2, **args)
    assert one.total("waits") == 0 and not one.notes
    assert two.total("waits") > 0
    assert two.total("downloads") > one.total("downloads")
    assert two.notes == [PIN_WAITS.format(two.total("waits"))]


def test_opening_shares_the_link() -> None:
    # steps 0..3 need 100 B each; 1,000 B/s, 0.05 s latency, room for 300 B
    by_step = np.array([100, 100, 100, 100, 0, 0], np.int64)
    alone, _ = _timeline(by_step, 1000.0, 0.05, 0.01, 1, 300, 1)
    assert alone == pytest.approx(0.15)  # step 0's bytes alone
    shared, _ = _timeline(by_step, 1000.0, 0.05, 0.01, 1, 300, 4)
    assert shared == pytest.approx(0.35)  # steps 0..2 together: the cache holds 300 B
    roomy, _ = _timeline(by_step, 1000.0, 0.05, 0.01, 1, None, 4)
    assert roomy == pytest.approx(0.45)


def test_the_oldest_pin_goes_first() -> None:
    # room for 2, every shard held for 3 ticks: C's download finds A and B, both held; the
    # consumer that read A (the oldest) finishes first, so A is evicted, not B
    rep = CacheReplay(ONES, 2, "next_use", 3)
    out = rep.epoch(np.array([0, 1, 2]), np.array([0, 1, 2]), 3)
    assert sorted(rep.present) == [1, 2]
    assert out.waits == 1
