"""The node future (``astream.core.eviction``) against a brute-force oracle built from the
plan's own batches, over generated plans: every algorithm and batching method, shuffled or
not, several streams, World shapes, resume positions and batch sizes.

The oracle reads rank batch ``j`` of every rank with ``plan.rank_positions`` (the dealing the
readers use), so a tick is ``j * batch_size + i`` for the ``i``-th sample of the batch, and a
shard's read in a batch is its first appearance there. Everything the eviction rule asks of
the future is compared with it exactly: the steps of the epoch, each rank's (tick, shard)
reads, the node's merged reads, the distance to the next read from any tick for any set of
ranks, and the consumer clocks of DataLoader workers.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from astream.core.eviction import (
    NEVER,
    ConsumerClock,
    NodeFuture,
    eviction_order,
    node_steps,
    rank_uses,
    step_uses,
    victim_key,
)
from astream.core.order import StreamSpec, plan_epoch
from astream.core.world import World
from astream.errors import ConfigError

ALGOS = ["astream", "py1e", "py1br", "py1s", "py2s", "naive"]
METHODS = ["random", "stratified", "per_stream", "device_per_stream"]
pytestmark = pytest.mark.filterwarnings("ignore:shuffle_block_size is smaller")


@st.composite
def cases(draw: st.DrawFn) -> tuple[object, World, int]:
    nstreams = draw(st.integers(1, 2))
    streams = []
    for _ in range(nstreams):
        shards = draw(st.lists(st.integers(1, 9), min_size=1, max_size=6))
        streams.append(StreamSpec(np.array(shards, np.int64)))
    method = draw(st.sampled_from(METHODS if nstreams > 1 else ["random"]))
    world = draw(
        st.sampled_from(
            [
                World(1, 1, 1),
                World(1, 2, 1),
                World(1, 2, 2),
                World(2, 1, 2),
                World(2, 2, 1),
                World(1, 3, 1),
            ]
        )
    )
    algo = draw(st.sampled_from(ALGOS))
    ncn = world.num_nodes * draw(st.sampled_from([1, 2]))
    bs = draw(st.integers(1, 4))
    try:
        plan = plan_epoch(
            streams,
            seed=draw(st.integers(0, 2**16)),
            epoch=draw(st.integers(0, 1)),
            num_canonical_nodes=ncn,
            batch_size=bs,
            shuffle=draw(st.booleans()),
            shuffle_algo=algo,
            shuffle_block_size=draw(st.sampled_from([None, 3, 7])),
            batching_method=method,
            global_batch_size=bs * world.num_ranks,
        )
        plan.rank_num_samples(world, 0, 0)
    except (ConfigError, ValueError):  # refused by the planner (tested elsewhere); the
        reject()  # reference shuffles refuse a stream smaller than the canonical nodes
    start = draw(st.integers(0, max(0, plan.num_samples - 1)))
    if method != "random":  # these resume at whole global batches only
        start -= start % (bs * world.num_ranks)
    try:
        plan.rank_num_samples(world, 0, start)
    except ConfigError:
        reject()
    return plan, world, start


def _oracle_reads(plan: object, world: World, rank: int, start: int) -> list[tuple[int, int]]:
    """(tick, shard) of each shard's first read in each of ``rank``'s batches."""
    bs = plan.batch_size  # type: ignore[attr-defined]
    steps = node_steps(plan, world, start)
    out = []
    for j in range(steps):
        pos = plan.rank_positions(world, rank, j, start)  # type: ignore[attr-defined]
        shards = plan.shard_of(plan.ids_at(np.asarray(pos, np.int64)))  # type: ignore[attr-defined]
        seen: set[int] = set()
        for i, s in enumerate(shards.tolist()):
            if s not in seen:
                seen.add(s)
                out.append((j * bs + i, s))
    return out


def _oracle_steps(plan: object, world: World, start: int) -> int:
    n = plan.rank_num_samples(world, 0, start)  # type: ignore[attr-defined]
    bs = plan.batch_size  # type: ignore[attr-defined]
    if plan.batching_method == "device_per_stream":  # type: ignore[attr-defined]
        return n // bs
    return -(-n // bs)


SETTINGS = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


@SETTINGS
@given(cases())
def test_rank_and_node_reads_are_the_plans(case: tuple[object, World, int]) -> None:
    plan, world, start = case
    steps = _oracle_steps(plan, world, start)
    assert node_steps(plan, world, start) == steps
    bs = plan.batch_size  # type: ignore[attr-defined]
    for node in range(world.num_nodes):
        merged: set[tuple[int, int]] = set()
        for local in range(world.ranks_per_node):
            rank = node * world.ranks_per_node + local
            want = _oracle_reads(plan, world, rank, start)
            t, s = rank_uses(plan, world, rank, 0, steps + 3, start)
            assert list(zip(t.tolist(), s.tolist())) == sorted(want)
            merged |= set(want)
            # any window of steps is the matching slice of the whole
            j0, j1 = steps // 3, steps - steps // 4
            t, s = rank_uses(plan, world, rank, j0, j1, start)
            assert list(zip(t.tolist(), s.tolist())) == sorted(
                (tick, sh) for tick, sh in want if j0 * bs <= tick < j1 * bs
            )
        t, s = step_uses(plan, world, node, 0, steps, start)
        assert list(zip(t.tolist(), s.tolist())) == sorted(merged)


@SETTINGS
@given(cases(), st.data())
def test_next_use_is_the_soonest_read_by_any_listed_rank(
    case: tuple[object, World, int], data: st.DataObject
) -> None:
    plan, world, start = case
    node = data.draw(st.integers(0, world.num_nodes - 1))
    bs = plan.batch_size  # type: ignore[attr-defined]
    steps = _oracle_steps(plan, world, start)
    reads = [
        _oracle_reads(plan, world, node * world.ranks_per_node + local, start)
        for local in range(world.ranks_per_node)
    ]
    nshards = int(plan.shard_of(np.array([0], np.int64))[0]) + 1  # type: ignore[attr-defined]
    nshards = max([nshards] + [s + 1 for r in reads for _, s in r])
    shards = np.array([-1, *range(nshards)], np.int64)
    horizon = data.draw(st.sampled_from([2, 3, 5, 1 << 20]))  # in samples
    future = NodeFuture(plan, world, node, start, horizon_samples=horizon * bs)
    assert future.steps == steps and future.ticks == steps * bs
    half = future.horizon // 2
    now_lists = data.draw(
        st.lists(
            st.lists(st.one_of(st.none(), st.integers(-2, steps * bs + 2)),
                     min_size=world.ranks_per_node, max_size=world.ranks_per_node),
            min_size=1, max_size=4,
        )
    )  # fmt: skip
    for nows in sorted(now_lists, key=lambda n: [x or 0 for x in n]):
        got = future.next_use(shards, nows)
        assert got.dtype == np.int64 and len(got) == len(shards)
        assert got[0] == NEVER  # no known shard
        for k, s in enumerate(shards.tolist()):
            if s < 0:
                continue
            best = NEVER
            reach_ok = True
            for local, now in enumerate(nows):
                if now is None or now >= steps * bs:
                    continue
                now = max(0, now)
                later = [t for t, sh in reads[local] if sh == s and t >= now]
                if later:
                    d = later[0] - now
                    best = min(best, d)
                    if later[0] >= (now // bs + half) * bs:
                        reach_ok = False  # may lie past this rank's window
            if reach_ok:
                assert got[k] == best, (s, nows, got[k], best)
            else:
                assert got[k] == best or got[k] > best, (s, nows, got[k], best)
                assert got[k] == NEVER or got[k] >= best


@SETTINGS
@given(cases(), st.data())
def test_a_workers_clock_is_its_rank_batches(
    case: tuple[object, World, int], data: st.DataObject
) -> None:
    plan, world, start = case
    rank = data.draw(st.integers(0, world.num_ranks - 1))
    worker = data.draw(st.integers(0, world.workers_per_rank - 1))
    bs = plan.batch_size  # type: ignore[attr-defined]
    skip = bs * data.draw(st.integers(0, 3))
    clock = ConsumerClock.for_consumer(plan, world, rank, worker, start, skip)
    assert clock.local == rank % world.ranks_per_node
    assert clock.future.node == world.node_of(rank) and clock.future.start == start
    assert clock.workers == world.workers_per_rank
    # the worker's k-th batch after skipping `skip` of its own samples is rank batch
    # worker + (skip // bs + k) * W; its offset-th sample is that batch's tick + offset
    for k in range(3):
        j = worker + (skip // bs + k) * world.workers_per_rank
        offset = data.draw(st.integers(0, bs - 1))
        assert clock.tick(k, offset) == j * bs + offset


def test_victim_keys_order_by_distance_then_age() -> None:
    assert victim_key("lru", 5, 2.0) == (0.0, 2.0)
    assert victim_key("next_use", 5, 2.0) == (-5.0, 2.0)
    assert victim_key("next_use", NEVER, 1.0) < victim_key("next_use", 10**6, 0.0)
    nxt, last = [3, 3, NEVER, 7], [2.0, 1.0, 5.0, 0.0]
    assert eviction_order("next_use", nxt, last) == [2, 3, 1, 0]
    assert eviction_order("lru", nxt, last) == [3, 1, 0, 2]
    assert eviction_order("next_use", np.array([], np.int64), []) == []


def _sizes_plan(bs: int = 2) -> object:
    return plan_epoch([StreamSpec(np.full(12, 5, np.int64))], seed=7, epoch=0,
                      num_canonical_nodes=1, batch_size=bs, shuffle=True)  # fmt: skip


def test_empty_windows_are_empty_int64_arrays() -> None:
    plan, world = _sizes_plan(), World(1, 2, 1)
    steps = node_steps(plan, world)
    for t, s in (rank_uses(plan, world, 1, steps, steps + 5),
                 rank_uses(plan, world, 0, 3, 3),
                 step_uses(plan, world, 0, steps, steps + 1)):  # fmt: skip
        assert (t.dtype, s.dtype, len(t), len(s)) == (np.int64, np.int64, 0, 0)
    # start defaults to the epoch's beginning
    a, b = rank_uses(plan, world, 1, 0, 4), rank_uses(plan, world, 1, 0, 4, 0)
    assert a[0].tolist() == b[0].tolist() and a[1].tolist() == b[1].tolist()


def _expected_windows(nows: list[int], bs: int, horizon: int, steps: int) -> int:
    """The recompute rule of the module docstring: a rank's window [lo, lo + horizon) steps is
    kept while its step is in [lo, lo + horizon // 2) or the window reaches the epoch's end."""
    count, lo, hi = 0, None, 0
    for now in nows:
        if now >= steps * bs:
            continue  # past the end: nothing to look up
        step = max(0, now) // bs
        if lo is not None and lo <= step and (step < lo + horizon // 2 or hi >= steps):
            continue
        lo, hi, count = step, min(step + horizon, steps), count + 1
    return count


@pytest.mark.parametrize("horizon", [2, 5, 6, 9])
def test_windows_are_recomputed_past_their_middle_only(horizon: int) -> None:
    plan, world = _sizes_plan(bs=2), World(1, 1, 1)
    bs = 2
    steps = node_steps(plan, world)
    future = NodeFuture(plan, world, 0, horizon_samples=horizon * bs)
    assert future.horizon == horizon
    nows = [*range(0, steps * bs + 3), 7, 3, steps * bs, steps * bs - 1]  # forwards, back, end
    for k in range(1, len(nows) + 1):
        future.next_use(np.arange(12), [nows[k - 1]])
        assert future.windows == _expected_windows(nows[:k], bs, horizon, steps), nows[:k]


def test_defaults_and_partial_skips() -> None:
    plan, world = _sizes_plan(bs=4), World(1, 2, 2)
    assert node_steps(plan, world) == node_steps(plan, world, 0) != node_steps(plan, world, 5)
    clock = ConsumerClock.for_consumer(plan, world, 1, 1)
    assert (clock.future.start, clock.first, clock.tick(2)) == (0, 1, clock.tick(2, 0))
    assert clock.tick(2) == (1 + 2 * 2) * 4
    # a skip that is not a whole number of batches: the batches fully yielded count
    assert ConsumerClock.for_consumer(plan, world, 1, 1, 0, 4 + 3).first == 1 + 1 * 2
    # batch size 1: the horizon is the horizon in samples
    one = _sizes_plan(bs=1)
    assert NodeFuture(one, World(1, 1, 1), 0, horizon_samples=7).horizon == 7
    # with one sample per batch every default shows: start 0, skip 0
    assert node_steps(one, World(1, 1, 1)) == 60 != node_steps(one, World(1, 1, 1), 1)
    assert ConsumerClock.for_consumer(one, World(1, 1, 2), 0, 1).first == 1
