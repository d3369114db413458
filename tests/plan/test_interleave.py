"""The plan's spread over the consumers' interleavings: prefetch tries in the timed replay
(``CacheReplay.epoch_timed``), the wait for a pin in victim order, and ``interleavings=``."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from astream.cli import main
from astream.core.cachesim import CacheReplay
from astream.errors import ConfigError
from astream.plan import RUNS_NO_SPREAD, simulate_index, synthetic_index

ONES = np.ones(4, np.int64)  # shards 0..3 of 1 byte each
A, B, C, X = 0, 1, 2, 3


def _timed(policy: str, events: list[tuple[int, int, bool]], limit: int) -> Any:
    t, s, tr = zip(*events)
    rep = CacheReplay(ONES, limit, policy)
    return rep, rep.epoch_timed(np.array(t), np.array(s), np.array(tr), 100)


def test_a_prefetch_takes_free_room_only() -> None:
    # room for 2: A and B are read; C's try at 2 finds no room and downloads nothing (never
    # evicts); C's read at 3 downloads it, evicting
    _, out = _timed("next_use", [(0, A, False), (1, B, False), (2, C, True), (3, C, False)], 2)
    assert out.downloads == 3 and out.dl_shards.tolist() == [A, B, C]
    assert out.dl_steps.tolist() == [0, 1, 3] and out.evictions == 1
    # with free room the try downloads it then (and the read finds it)
    _, out = _timed("next_use", [(0, A, False), (2, C, True), (3, C, False)], 2)
    assert out.dl_steps.tolist() == [0, 2] and out.evictions == 0


def test_a_try_of_a_present_shard_is_nothing() -> None:
    _, out = _timed("lru", [(0, A, False), (1, A, True), (2, A, False)], 2)
    assert out.downloads == 1


@pytest.mark.parametrize(("policy", "downloads"), [("lru", [X, A, B, X]), ("next_use", [X, A, B])])
def test_an_unread_prefetch_is_the_lru_victim(policy: str, downloads: list[int]) -> None:
    # what the real runs showed: X is prefetched into free room for a read far ahead; a demand
    # read then needs room. LRU evicts X (never read, so least recently used) and downloads it
    # again; next-use keeps it and evicts A (not read again)
    events = [(0, X, True), (1, A, False), (2, B, False), (10, X, False)]
    _, out = _timed(policy, events, 2)
    assert out.dl_shards.tolist() == downloads


def test_a_wait_for_pins_evicts_in_victim_order() -> None:
    # room for 2, every read held for 3 ticks: C's download at 2 finds A and B held. The runtime
    # waits for the pin of the first held shard in victim order (CacheSpace._evict: furthest
    # next use under next_use): B (next read at 10), not A (the oldest read, next read at 5)
    rep = CacheReplay(ONES, 2, "next_use", 3)
    out = rep.epoch(np.array([0, 1, 2, 5, 10]), np.array([A, B, C, A, B]), 11)
    assert out.dl_shards.tolist() == [A, B, C, B]
    assert out.waits == 1


def _plan(**kw: Any) -> Any:
    index = synthetic_index(3_000, 48, 5_000)
    args = dict(
        batch_size=8,
        ranks_per_node=2,
        workers=2,
        epochs=2,
        cache_limit=30_000,
        cache_policy=("next_use", "lru"),
        shuffles=["astream"],
        shuffle_block_size=200,
    )
    args.update(kw)
    return simulate_index(index, **args)  # fmt: skip


def test_interleavings_give_a_range_around_the_fixed_replay() -> None:
    got = _plan(interleavings=6)
    again = _plan(interleavings=6)
    for r, r2 in zip(got, again):
        for f, f2 in zip(r.epochs, r2.epochs):
            assert f.bytes_range == f2.bytes_range  # seeded: the same every time
            assert f.bytes_range is not None and f.downloads_range is not None
            lo, med, hi = f.bytes_range
            assert lo <= med <= hi and lo <= f.bytes <= hi
            assert f.downloads_range[0] <= f.downloads <= f.downloads_range[2]
            if f.epoch == 0:  # a cold cache: every shard read is downloaded at least once
                assert lo >= f.distinct_shards * 5_000
        assert r.span("bytes", 0) == r.epochs[0].bytes_range
    # the spread is there (prefetches racing demand reads), and bounded
    lru = next(r for r in got if r.policy == "lru")
    lo, _, hi = lru.span("bytes", 0)
    assert lo < hi <= 1.3 * lo


def test_no_range_without_interleavings_or_limit() -> None:
    (r,) = _plan(interleavings=0, cache_policy="lru")
    assert r.span("bytes") is None and r.epochs[0].bytes_range is None
    (r,) = _plan(interleavings=4, cache_policy="lru", cache_limit=None)
    assert r.span("bytes") is None


def test_runs_model_says_it_has_no_range() -> None:
    (r,) = _plan(interleavings=4, cache_policy="lru", model="runs")
    assert r.span("bytes") is None and RUNS_NO_SPREAD in r.notes


@pytest.mark.parametrize("bad", [-1, 1.5, True, "4"])
def test_interleavings_is_checked(bad: Any) -> None:
    with pytest.raises(ConfigError, match="interleavings must be an int >= 0"):
        _plan(interleavings=bad)


def test_cli_shows_the_range(capsys: Any) -> None:
    args = ["plan", "synthetic:3000:48:5000", "--batch-size", "8", "--ranks", "2", "--workers",
            "2", "--cache-limit", "30000", "--shuffle-block-size", "200", "--shuffle-algo",
            "astream"]  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    head, *rows = out.splitlines()
    assert "BYTES RANGE" in head
    assert all(re.search(r"\d KiB-[\d.]+ KiB", row) for row in rows if row.startswith("astream"))
    assert main([*args, "--interleavings", "0"]) == 0
    assert "BYTES RANGE" not in capsys.readouterr().out


def test_first_batch_alone_is_step_zero_on_the_link() -> None:
    # 1,000 B shards, 100 kB/s (0.8 Mb/s), 20 ms latency: step 0's bytes alone, and the opening
    # (every worker's first window sharing the link) no faster than that
    (r,) = _plan(cache_policy="next_use", bandwidth_mbps=0.8, latency_ms=20, epochs=1)
    f = r.epochs[0]
    assert f.first_batch_alone_s == pytest.approx(0.02 + int(f.bytes_by_step[0]) / 100_000)
    assert f.first_batch_s is not None and f.first_batch_alone_s < f.first_batch_s


def test_cli_leaves_the_range_out_above_its_bound(capsys: Any) -> None:
    # default --interleavings: none above 2**20 samples per node (each one is an exact replay)
    args = ["plan", "synthetic:3000000:1000", "--batch-size", "32", "--ranks", "2",
            "--cache-limit", "1gb", "--shuffle-algo", "none", "--model", "runs"]  # fmt: skip
    assert main(args) == 0
    head, *rest = capsys.readouterr().out.splitlines()
    assert "BYTES RANGE" not in head
    assert any(n.startswith("note: no BYTES RANGE: 3,000,000 samples per node") for n in rest)
