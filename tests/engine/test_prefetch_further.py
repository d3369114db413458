"""A cold consumer plans past ``ahead`` while the prefetcher has idle slots (``Lookahead.further``).

Without it the download slots idle whenever the window's shards are all fetched or fetching: at
the tail of a shuffled epoch, shards first used late were announced only when the window reached
them (measured: 0.3-0.6 s with nothing downloading, then the consumer waiting for those shards).
The lookahead logic is exercised directly (the plan and the prefetcher's bookkeeping are plain
objects); which settings allow it is checked on real datasets, and a cold epoch over moto still
yields every sample once, in the plan's order, with the window extended.
"""

from __future__ import annotations

import concurrent.futures
from typing import Any

import numpy as np
import pytest

from astream import StreamingDataset
from astream.runtime.prefetch import (
    _CHUNK,
    _FURTHER_STEP,
    FURTHER,
    STEP_DONE,
    STEP_LOCATE,
    Lookahead,
)

from .conftest import labels
from .test_chunk_groups import _Catalog


class _Prefetch:
    """What the lookahead asks of a prefetcher: ``want``, ``running``, ``concurrency``,
    ``started``. ``busy`` downloads are pending futures nobody completes; with ``pending``
    each wanted shard adds one (a download started), else it ends at once (the shard was
    present, or another process had its lock)."""

    def __init__(self, busy: int = 0, started: bool = True, pending: bool = False) -> None:
        self.wanted: list[int] = []
        self.concurrency = 4
        self.started = started
        self.pending = pending
        self._busy: list[Any] = [concurrent.futures.Future() for _ in range(busy)]

    def want(self, s: int) -> None:
        self.wanted.append(s)
        if self.pending:
            self._busy.append(concurrent.futures.Future())

    def running(self) -> list[Any]:
        return [f for f in self._busy if not f.done()]


def _plan(seed: int = 3) -> tuple[_Catalog, list[np.ndarray]]:
    """200 batches of 32 over 200 shards of 100 samples; batch k draws from ids
    [25k, 25k + 400): a window that moves along the shards, as a shuffle block does."""
    rng = np.random.default_rng(seed)
    cat = _Catalog(np.full(200, 100))
    return cat, [rng.integers(25 * k, 25 * k + 400, 32).astype(np.int64) for k in range(200)]


def _first_use(cat: _Catalog, batches: list[np.ndarray]) -> list[int]:
    return list(dict.fromkeys(int(s) for b in batches for s in cat.locate(b)[0]))


def test_idle_slots_plan_further_in_plan_order() -> None:
    cat, batches = _plan()
    pf = _Prefetch()
    la = Lookahead(iter(batches), cat, pf, ahead=320, further=FURTHER)  # type: ignore[arg-type]
    next(la)
    # idle slots: the window runs to FURTHER x ahead samples past the consumer, and every
    # shard of those batches is announced, in order of first use
    # (planned before the batch was handed out: the handed-out one no longer counts)
    assert la.queued == FURTHER * 320 - 32
    assert pf.wanted == _first_use(cat, batches[: FURTHER * 320 // 32])
    la.further()  # tops the window up again: one batch
    assert la.queued == FURTHER * 320
    assert pf.wanted == _first_use(cat, batches[: 1 + FURTHER * 320 // 32])
    la.further()  # at its limit: nothing more
    assert la.queued == FURTHER * 320
    for k, (groups, size) in enumerate(la, 1):  # the batches themselves are unchanged
        assert size == 32
        assert sorted(j for _, pos, _ in groups for j in pos) == list(range(32)), k
    assert pf.wanted == _first_use(cat, batches)


def test_each_batch_plans_at_most_one_step_further() -> None:
    """A cold start with a window far larger than a step: each batch handed out plans at most
    ``_FURTHER_STEP`` samples more (planning all of ``FURTHER * ahead`` at once held the
    caller's event loop for 210 ms at ten million samples), and the window still grows to it."""
    cat = _Catalog(np.full(1000, 100))
    batches = [np.arange(32 * k, 32 * k + 32, dtype=np.int64) % 100_000 for k in range(6000)]
    pf = _Prefetch()
    ahead = 20_000
    la = Lookahead(iter(batches), cat, pf, ahead=ahead, further=FURTHER)  # type: ignore[arg-type]
    seen = []
    for _ in range(8):
        before = la.queued
        next(la)
        seen.append(la.queued)
        # the window's opening (256 samples, first batch only) and a step, to a whole batch
        assert la.queued - before <= (256 if not seen[:-1] else 0) + _FURTHER_STEP + 32, seen
    assert seen[0] >= _FURTHER_STEP, seen  # the first batch did plan a step
    assert seen[-1] == FURTHER * ahead - 32, seen  # the full window (less the batch handed out)


@pytest.mark.parametrize(
    ("busy", "started", "further"),
    [(4, True, FURTHER), (0, False, FURTHER), (0, True, 1)],
    ids=["slots-busy", "hot-cache", "not-allowed"],
)
def test_no_planning_past_ahead(busy: int, started: bool, further: int) -> None:
    cat, batches = _plan()
    pf = _Prefetch(busy=busy, started=started)
    la = Lookahead(iter(batches), cat, pf, ahead=320, further=further)  # type: ignore[arg-type]
    for _ in range(5):
        next(la)
        la.further() if started else None
        assert la.queued <= 320
    window = batches[: 5 + 320 // 32]
    assert set(pf.wanted) <= set(_first_use(cat, window))


def test_busy_slots_freed_extend_the_window_one_download_at_a_time() -> None:
    cat, batches = _plan()
    pf = _Prefetch(pending=True)
    la = Lookahead(iter(batches), cat, pf, ahead=320, further=FURTHER)  # type: ignore[arg-type]
    next(la)
    assert len(pf.running()) >= 4  # the window's own downloads fill the slots
    assert la.queued <= 320
    queued, wanted = la.queued, len(pf.wanted)
    la.further()
    assert (la.queued, len(pf.wanted)) == (queued, wanted)  # no slot free: nothing
    for f in pf._busy[:-2]:
        f.set_result(True)  # all but two downloads ended: two slots to fill
    la.further()
    assert len(pf.wanted) >= wanted + 2
    # it stopped once the new downloads filled the slots (the batches up to the second new
    # shard), far short of FURTHER x ahead
    assert len(pf.running()) == 4
    assert queued < la.queued < FURTHER * 320 // 2


def test_which_settings_plan_further(local_dataset: Any, tmp_path: Any) -> None:
    path, _ = local_dataset
    remote = dict(remote=path, batch_size=8, shuffle=True)
    plain = StreamingDataset(local=str(tmp_path / "a"), **remote)
    assert plain.engine._further() == FURTHER
    limited = StreamingDataset(local=str(tmp_path / "b"), cache_limit=10**9, **remote)
    assert limited.engine._further() == 1
    fixed = StreamingDataset(local=str(tmp_path / "c"), predownload=64, **remote)
    assert fixed.engine._further() == 1


def test_cold_epoch_over_s3_keeps_its_order(s3_dataset: Any, fresh_local: Any) -> None:
    url, samples = s3_dataset
    cold = StreamingDataset(remote=url, local=fresh_local(), batch_size=8, shuffle=True)
    got = list(cold)
    hot = StreamingDataset(remote=url, local=fresh_local("hot"), batch_size=8, shuffle=True)
    hot.engine.cache_limit = 10**9  # no planning past ahead: the reference order
    assert cold.engine._further() == FURTHER and hot.engine._further() == 1
    assert labels(got) == labels(list(hot))
    assert sorted(labels(got)) == list(range(len(samples)))
    for s in got:
        assert np.array_equal(s["ids"], samples[s["label"]]["ids"])


def _drive(la: Lookahead) -> list[tuple[Any, int]]:
    """What ``aiter`` does with a stepwise lookahead: step() until done (locate() when asked),
    then take a batch; returns the batches handed out."""
    out = []
    while True:
        while (asked := la.step()) != STEP_DONE:
            if asked == STEP_LOCATE:
                la.locate()
        got = next(la, None)
        if got is None:
            return out
        out.append(got)


@pytest.mark.parametrize("started", [True, False], ids=["cold", "hot"])
def test_a_stepwise_consumer_plans_and_announces_as_the_plain_one(started: bool) -> None:
    """``aiter``'s lookahead plans between batches with step() and locate() (which runs in a
    thread there): the same batches, the same shards announced in the same order."""
    cat, batches = _plan()
    pf_plain, pf_step = _Prefetch(started=started), _Prefetch(started=started)
    plain = Lookahead(iter(batches), cat, pf_plain, ahead=320, further=FURTHER)  # type: ignore[arg-type]
    stepwise = Lookahead(iter(batches), cat, pf_step, ahead=320, further=FURTHER)  # type: ignore[arg-type]
    stepwise.stepwise = True
    want = list(plain)
    got = _drive(stepwise)
    assert len(got) == len(want) == 200
    for (g1, n1), (g2, n2) in zip(got, want):
        assert n1 == n2 and [tuple(x) for x in g1] == [tuple(x) for x in g2]
    assert pf_step.wanted == pf_plain.wanted == _first_use(cat, batches)


def test_each_step_plans_at_most_a_step_and_never_walks_the_plan() -> None:
    """step() plans at most one grouped chunk (``_CHUNK`` samples, or one batch when batches
    are larger), and only from batches already grouped: walking the plan is locate()'s, which
    ``aiter`` runs in a thread. The window (and, cold, FURTHER times it) is still reached."""
    cat = _Catalog(np.full(1000, 100))
    small = [np.arange(32 * k, 32 * k + 32, dtype=np.int64) % 100_000 for k in range(3000)]
    big = [np.arange(k, k + 10_000, dtype=np.int64) % 100_000 for k in range(40)]
    for plan, ahead, size in ((small, 20_000, 32), (big, 30_000, 10_000)):
        la = Lookahead(iter(plan), cat, _Prefetch(), ahead=ahead, further=FURTHER)  # type: ignore[arg-type]
        la.stepwise = True
        walked = [0]

        def counted(src: Any, walked: list[int] = walked) -> Any:
            for b in src:
                walked[0] += 1
                yield b

        la._src = counted(la._src)
        for _ in range(6):
            while True:
                before, n = la.queued, walked[0]
                asked = la.step()
                assert walked[0] == n, size  # step() never walks the plan
                assert la.queued - before <= max(_CHUNK, size), (size, la.queued - before)
                if asked == STEP_DONE:
                    break
                if asked == STEP_LOCATE:
                    la.locate()
                    assert walked[0] > n
            n = walked[0]
            next(la)
            assert walked[0] == n  # nor does handing out a batch
        assert la.queued >= FURTHER * ahead - 2 * size, (size, la.queued)
