"""EpochPlan's dealing where a wrong constant or a dropped line in dealing.py would go unseen:
the plan's defaults, ids past the epoch's end, exact shard ends, ``dealt_span``, the padded
counts of ``device_per_stream``, its padding with fewer chunks left than ranks, and
``rank_positions_span`` against ``rank_positions``.

Expected values are written out from the rules in dealing.py's and order.py's docstrings.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from astream.core.dealing import EpochPlan
from astream.core.order import StreamSpec, plan_epoch
from astream.core.world import World
from astream.errors import ConfigError

from .helpers import plan, reference_deal, round_robin

SIZES = [np.array([4, 2], np.int64), np.array([3, 1], np.int64)]


def device_plan() -> EpochPlan:
    """Two streams, 10 samples, batch 2: five device batches (chunks) of one stream each."""
    return plan_epoch(
        [StreamSpec(s) for s in SIZES], seed=0, epoch=0, num_canonical_nodes=1, batch_size=2,
        shuffle=True, batching_method="device_per_stream",
    )  # fmt: skip


# -- the plan's defaults ---------------------------------------------------------------------


def test_plan_names_its_batching_method() -> None:
    assert plan([5, 4], batch_size=2).batching_method == "random"
    two = [StreamSpec(np.array([6, 6], np.int64)), StreamSpec(np.array([4, 8], np.int64))]
    strat = plan_epoch(two, seed=0, epoch=0, num_canonical_nodes=1, batch_size=4, shuffle=True,
                       batching_method="stratified")  # fmt: skip
    assert strat.batching_method == "stratified"
    assert device_plan().batching_method == "device_per_stream"


def test_direct_plan_defaults() -> None:
    base = plan([5, 4], batch_size=2)
    sub, sizes = base._subs[0], [np.array([5, 4], np.int64)]
    p = EpochPlan([sub], None, 2, 8, 1, sizes)
    assert (p.partition_algo, p.batching_method, p.num_samples) == ("relaxed", "random", 9)
    strata = EpochPlan([sub, sub], np.array([1, 1], np.int64), 2, 8, 1, sizes)
    assert strata.batching_method == "stratified" and strata.num_samples == 18
    # chunks without a unit: one position per chunk
    chunks = (np.zeros(6, np.int32), np.array([5, 4, 3, 2, 1, 0], np.int64))
    one = EpochPlan([sub], None, 1, 8, 1, sizes, method="per_stream", chunks=chunks)
    assert one.num_samples == 6
    expected = sub.ids_at(np.array([5, 4, 3, 2, 1, 0], np.int64)).tolist()
    assert one.ids_at(np.arange(6, dtype=np.int64)).tolist() == expected


# -- the global sequence ---------------------------------------------------------------------


def test_positions_past_the_end_wrap_around() -> None:
    p = plan([5, 4, 7], batch_size=2, num_canonical_nodes=2)
    n = p.num_samples
    wrapped = p.ids_at(np.array([n, n + 1, 2 * n + 2, n + n - 1], np.int64)).tolist()
    assert wrapped == p.ids_at(np.array([0, 1, 2, n - 1], np.int64)).tolist()


def test_any_position_past_the_end_reads_its_remainder() -> None:
    # G[(p - N) mod N] even where p + N would overflow int64 (N = 19, which 2**64 is not a
    # multiple of, so a wrapped sum lands elsewhere)
    p = plan([5, 4, 7, 3], batch_size=2, num_canonical_nodes=2)
    n = p.num_samples
    assert n == 19
    far = [2**63 - 1, 2**63 - 5, 2**62 + 3]
    want = p.ids_at(np.array([(q - n) % n for q in far], np.int64)).tolist()
    assert p.ids_at(np.array(far, np.int64)).tolist() == want
    assert len(set(p.ids_at(np.arange(n, dtype=np.int64)).tolist())) == n  # all distinct


def test_global_ids_take_numpy_integer_bounds() -> None:
    p = plan([5, 4, 7, 3], batch_size=2, num_canonical_nodes=2)
    want = p.ids_at(np.arange(2, 9, dtype=np.int64)).tolist()
    for lo, hi in [(2, 9), (np.int32(2), np.int32(9)), (np.uint64(2), np.uint64(9))]:
        got = p.global_ids(lo, hi)  # type: ignore[arg-type]
        assert got.dtype == np.int64 and got.tolist() == want, (type(lo), got)


def test_shard_ends_are_exact_past_two_to_the_53() -> None:
    big = plan_epoch([StreamSpec(np.array([2**53 + 1, 3], np.int64))], seed=0, epoch=0,
                     num_canonical_nodes=1, batch_size=2, shuffle=True)  # fmt: skip
    # shard 0 holds ids [0, 2**53 + 1): its last id is 2**53, a float64 rounds the end to it
    got = big.shard_of(np.array([2**53, 2**53 + 1, 2**53 + 3], np.int64))
    assert got.tolist() == [0, 1, 1]


# -- dealt_span ------------------------------------------------------------------------------


def test_dealt_span_of_astream_order() -> None:
    p = plan([5, 4, 7], batch_size=2, num_canonical_nodes=2)
    assert p.dealt_span(World(2, 2, 1)) == (0, 16)
    assert p.dealt_span(World(2, 2, 1), 5) == (5, 16)
    with pytest.raises(ConfigError, match="start=17 is past the epoch's 16 samples"):
        p.dealt_span(World(2, 2, 1), 17)


def test_dealt_span_of_reference_layout_rounds_and_widens() -> None:
    # unshuffled: the reference's layout of 10 samples on 2 canonical nodes (5 each)
    p = plan([10], batch_size=2, num_canonical_nodes=2, shuffle=False)
    assert p.dealt_span(World(1, 1, 1), 3) == (3, 10)
    assert p.dealt_span(World(2, 1, 1), 3) == (2, 10)  # rounded down to a multiple of 2 nodes
    # 4 nodes: each canonical node splits over 2 physical ones, 5 -> 6 positions each
    assert p.dealt_span(World(4, 1, 1), 6) == (4, 12)
    with pytest.raises(ConfigError, match="num_canonical_nodes=2 is incompatible"):
        plan([10], num_canonical_nodes=2, shuffle=False, partition_algo="orig").dealt_span(
            World(3, 1, 1)
        )


# -- device_per_stream -----------------------------------------------------------------------


def test_device_per_stream_counts_whole_device_batches() -> None:
    p = device_plan()
    w = World(1, 4, 1)
    # 5 chunks over 4 ranks: 2 batches each, 8 device batches of 2 samples
    assert p.padded_num_samples(w) == p.padded_num_samples(w, 0) == 16
    assert [p.rank_num_samples(w, r) for r in range(4)] == [4, 4, 4, 4]
    for r in range(4):
        assert sum(len(b) for b in round_robin(p, w, r)) == 4
    # resuming at chunk 3: 2 chunks left, one batch for every rank
    assert p.padded_num_samples(w, 6) == 8
    assert [p.rank_num_samples(w, r, 6) for r in range(4)] == [2, 2, 2, 2]


def test_device_per_stream_pads_with_fewer_chunks_than_ranks() -> None:
    p = device_plan()
    w = World(1, 4, 1)
    # batch 1 from the start: slot 0 reads chunk 4, slots 1..3 repeat chunks 1..3 (their chunk
    # one global batch earlier)
    assert [p.rank_positions(w, r, 1).tolist() for r in range(4)] == [
        [8, 9], [2, 3], [4, 5], [6, 7]
    ]  # fmt: skip
    # resuming at chunk 3 (position 6): chunks 3 and 4 are left for 4 ranks; slot s reads
    # chunk 3 + s mod 2
    got = [p.rank_positions(w, r, 0, 6) for r in range(4)]
    assert [g.tolist() for g in got] == [[6, 7], [8, 9], [6, 7], [8, 9]]
    assert all(g.dtype == np.int64 for g in got)
    # a single rank world resuming at chunk 4 reads it alone
    assert p.rank_positions(World(1, 1, 1), 0, 0, 8).tolist() == [8, 9]


# -- padding with fewer samples left than nodes ----------------------------------------------


@pytest.mark.parametrize("world", [World(5, 1, 1), World(5, 2, 1), World(4, 3, 1), World(7, 1, 2)])
@pytest.mark.parametrize("start", [0, 1, 4, 6])
def test_nodes_with_nothing_left_pad_as_the_reference(world: World, start: int) -> None:
    # 7 samples: resuming at 4 or 6 leaves 3 or 1, fewer than the nodes; a node with none
    # left reads start + slot mod (samples left), as the reference tiles its empty list
    p = plan([4, 3], batch_size=1, num_canonical_nodes=1)
    n = p.num_samples
    assert n == 7
    want = reference_deal(n, world, start)
    for rank in range(world.num_ranks):
        nb = p.rank_num_samples(world, rank, start)
        got = [int(q) for j in range(nb) for q in p.rank_positions(world, rank, j, start)]
        assert got == want[rank], (rank, start)


# -- rank_positions_span ---------------------------------------------------------------------


def test_batch_numbers_may_be_numpy_integers() -> None:
    p = plan([15, 14, 17, 13], batch_size=3, num_canonical_nodes=2)
    w = World(1, 2, 1)
    for j in range(3):
        want = p.rank_positions(w, 1, j).tolist()
        for kind in (np.int32, np.uint64):
            got = p.rank_positions(w, 1, kind(j))  # type: ignore[arg-type]
            assert got.dtype == np.int64 and got.tolist() == want, (kind, j)


@pytest.mark.parametrize("world", [World(1, 2, 1), World(2, 2, 2)])
def test_rank_positions_span_is_the_batches_concatenated(world: World) -> None:
    p = plan([15, 14, 17, 13], batch_size=3, num_canonical_nodes=2)
    nb = -(-p.rank_num_samples(world, 0) // 3)
    assert nb >= 3
    for rank in range(world.num_ranks):
        each = [p.rank_positions(world, rank, j).tolist() for j in range(nb)]
        for j0, j1 in [(0, nb), (1, 3), (-2, 2), (2, nb + 5), (0, 1), (nb - 1, nb)]:
            got = p.rank_positions_span(world, rank, j0, j1)
            want = [q for batch in each[max(0, j0) : min(j1, nb)] for q in batch]
            assert got.dtype == np.int64 and got.tolist() == want, (rank, j0, j1)
        for j0, j1 in [(3, 3), (5, 2), (nb, nb + 1), (-3, 0)]:
            got = p.rank_positions_span(world, rank, j0, j1)
            assert got.dtype == np.int64 and got.shape == (0,), (rank, j0, j1)
    # resuming: the same rule from the resume position
    each = [p.rank_positions(world, 0, j, 5).tolist() for j in range(2)]
    assert p.rank_positions_span(world, 0, 0, 2, 5).tolist() == each[0] + each[1]


# -- rank_positions refuses a batch the rank does not have -----------------------------------


def test_rank_positions_refuses_a_batch_past_the_ranks_batches() -> None:
    # device_per_stream resumed at the epoch's end: no batch left, so batch 1 of slot 0 is
    # not a pad of a real chunk (the formulas would read chunk 5, position 10, past the end)
    p = device_plan()
    w = World(1, 4, 1)
    assert p.rank_num_samples(w, 0, 10) == 0
    for batch in (0, 1):
        want = rf"^batch must be in \[0, 0\) \(the rank's batches from start=10\), got {batch}$"
        with pytest.raises(ConfigError, match=want):
            p.rank_positions(w, 0, batch, 10)
    assert p.rank_positions(w, 0, 1).tolist() == [8, 9]  # the last batch from the start
    with pytest.raises(ConfigError, match=r"^batch must be in \[0, 2\) .*start=0\), got 2$"):
        p.rank_positions(w, 0, 2)


@pytest.mark.parametrize(
    ("batch", "start", "nb"),
    [(-1, 0, 10), (10, 0, 10), (11, 0, 10), (np.int64(10), 0, 10), (-1, 42, 3), (3, 42, 3),
     (np.uint64(3), 42, 3)],
)  # fmt: skip
def test_rank_positions_refuses_out_of_range_batches(batch: int, start: int, nb: int) -> None:
    # 59 samples on 2 ranks: 30 per rank (one pad), 10 batches of 3; resuming at 42: 17 left,
    # 9 per rank, 3 batches
    p = plan([15, 14, 17, 13], batch_size=3, num_canonical_nodes=2)
    w = World(1, 2, 1)
    assert -(-p.rank_num_samples(w, 1, start) // 3) == nb
    last = p.rank_positions(w, 1, nb - 1, start).tolist()
    assert len(last) == 3 and max(last) < 59  # the last batch is there, its pad a real one
    want = rf"^batch must be in \[0, {nb}\) \(the rank's batches from start={start}\), got {batch}$"
    with pytest.raises(ConfigError, match=want):
        p.rank_positions(w, 1, batch, start)


@pytest.mark.parametrize(
    ("batch", "shown"),
    [(1.0, "float 1.0"), ("1", "str '1'"), (True, "bool True"), (np.bool_(False), "bool np.False_"),
     (None, "NoneType None")],
)  # fmt: skip
def test_rank_positions_batch_must_be_an_integer(batch: object, shown: str) -> None:
    p = plan([15, 14], batch_size=3)
    with pytest.raises(ConfigError, match=rf"^batch must be an int, got {re.escape(shown)}$"):
        p.rank_positions(World(1, 1, 1), 0, batch)  # type: ignore[arg-type]
