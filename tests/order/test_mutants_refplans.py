"""The reference plans' per-rank answers against mosaicml-streaming 0.13.0's goldens.

The golden tests (test_reference_batching/redeal/uneven) check what each DataLoader worker
yields; the planner and the cache also ask a plan for the positions of one rank batch
(``rank_positions``, ``rank_positions_span``), their ids (``ids_at``) and the sample counts
(``rank_num_samples``, ``padded_num_samples``). Those answers are checked here against the
same goldens, for each reference plan class: the random batching's padded layout
(``_ReferencePlan``, also on more nodes than canonical ones), its "relaxed" re-deal
(``_RedealPlan``) and the work arrays of ``stratified`` / ``per_stream`` /
``device_per_stream`` (``_ReferenceWorkPlan``).

Rank batch ``j`` is what worker ``j % W`` yields as its batch ``j // W`` (the DataLoader's
round robin), so the golden's (node, rank, worker, batch) array gives each rank's batches.
"""

from __future__ import annotations

import json
import os
import warnings

import numpy as np
import pytest

from astream.core.dealing import EpochPlan
from astream.core.order import StreamSpec, plan_epoch
from astream.core.world import World
from astream.errors import ConfigError

from .test_reference_uneven import case_plan

GOLDEN = os.path.join(os.path.dirname(__file__), "golden", "mosaic")
pytestmark = pytest.mark.filterwarnings("ignore:shuffle_block_size is smaller")


def _load(name: str) -> tuple[np.lib.npyio.NpzFile, dict]:
    data = np.load(os.path.join(GOLDEN, f"{name}.npz"))
    return data, json.loads(str(data["cases"]))


def rank_batches(want: np.ndarray, rank: int, rpn: int) -> list[list[int]]:
    """The rank's batches in reading order (worker ``j % W``'s batch ``j // W``), -1 dropped."""
    per = want[rank // rpn, rank % rpn]  # (workers, batches, batch size)
    w, b = per.shape[0], per.shape[1]
    return [[int(x) for x in per[j % w, j // w] if x != -1] for j in range(w * b)]


def check_rank_answers(p, want: np.ndarray, shape: list[int], start: int, nb_all: bool) -> None:
    """Every per-rank answer of ``p`` agrees with the golden work array ``want``.

    ``nb_all``: the plan's batch count is the golden's whole row count (the work plans keep
    the reference's empty batches); else the rank's samples over the batch size (random)."""
    pn, rpn, workers = shape
    world = World(pn, rpn, workers)
    bs = p.batch_size
    assert p.padded_num_samples(world, start) == int(np.count_nonzero(want >= 0))
    if start == 0:
        assert p.padded_num_samples(world) == int(np.count_nonzero(want >= 0))
    for rank in range(pn * rpn):
        rows = rank_batches(want, rank, rpn)
        count = sum(len(r) for r in rows)
        assert p.rank_num_samples(world, rank, start) == count, rank
        nb = len(rows) if nb_all else -(-count // bs)
        assert all(not r for r in rows[nb:]), rank  # past the plan's batches: only -1 rows
        got = []
        for j in range(nb):
            pos = p.rank_positions(world, rank, j, start)
            ids = p.ids_at(pos)
            assert pos.dtype == np.int64 and ids.dtype == np.int64
            got.append(ids.tolist())
        assert got == rows[:nb], rank
        for j in (nb, -1):
            with pytest.raises(ConfigError, match=rf"^batch must be in \[0, {nb}\) "):
                p.rank_positions(world, rank, j, start)
        if start == 0:  # the default resume position is the epoch's start: no resume warning
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                warnings.filterwarnings("ignore", message="shuffle_block_size is smaller")
                assert p.rank_num_samples(world, rank) == count
                assert p.rank_positions_span(world, rank, 0, nb).tolist() == [
                    int(q) for j in range(nb) for q in p.rank_positions(world, rank, j)
                ]
        windows = [(0, nb), (1, nb - 1), (-2, 2), (nb - 2, nb + 3), (3, 3), (2, 1), (-3, 0)]
        for j0, j1 in [*windows, (0, 0)]:
            span = p.rank_positions_span(world, rank, j0, j1, start)
            assert span.dtype == np.int64
            flat = [x for r in rows[max(0, j0) : max(0, min(j1, nb))] for x in r]
            assert p.ids_at(span).tolist() == flat, (rank, j0, j1)


# -- stratified, per_stream, device_per_stream: _ReferenceWorkPlan ---------------------------

_BATCHING, _BATCHING_META = _load("batching")
# one case of each method, shuffled and not, both stream sets, resumed inside the epoch
WORK_CASES = [14, 17, 68, 71, 134, 137, 794, 848, 917, 0, 66]


@pytest.mark.parametrize("k", WORK_CASES)
def test_work_plan_rank_answers_match_the_reference(k: int) -> None:
    c = _BATCHING_META["cases"][k]
    pn, rpn, _w = c["shape"]
    p = case_plan(c, _BATCHING_META["streams"], global_batch_size=c["batch"] * pn * rpn)
    want = _BATCHING[str(k)].astype(np.int64)
    check_rank_answers(p, want, c["shape"], c["start"], nb_all=True)


def test_work_plan_ids_follow_the_last_world_dealt() -> None:
    # positions are those of the global batch sequence of the World last dealt to
    c = _BATCHING_META["cases"][66]  # per_stream, 2x2x2, batch 8: global batch 32
    want = _BATCHING["66"].astype(np.int64)
    p = case_plan(c, _BATCHING_META["streams"], global_batch_size=32)
    assert p.padded_num_samples(World(2, 2, 2)) == int(np.count_nonzero(want >= 0))
    # the global batch sequence: global batch g is worker g % 2's batch g // 2, node-major
    flat = want.transpose(3, 2, 0, 1, 4).ravel()
    real = np.flatnonzero(flat >= 0)
    n = (int(real[-1]) // 32 + 1) * 32
    assert p.num_samples == n
    assert p.ids_at(np.arange(n, dtype=np.int64)).tolist() == flat[:n].tolist()
    # per_stream keeps whole global batches only: the sequence is n long, and wraps past it
    assert p.ids_at(np.array([n + 3, 2 * n + 9], np.int64)).tolist() == flat[[3, 9]].tolist()
    assert p.global_ids(0, 0).dtype == np.int64


# -- random batching: _ReferencePlan and its re-deal -----------------------------------------

_UNEVEN, _UNEVEN_META = _load("uneven")
# 2 canonical nodes on 4x1x2 (each widened to split over 2 physical nodes), resumed at 37
# (not a multiple of the 4 nodes); 8 canonical nodes on 2x2x2; 1 on 1x2x2, resumed and not
RANDOM_CASES = [44, 77, 11, 9]


@pytest.mark.parametrize("k", RANDOM_CASES)
def test_reference_plan_rank_answers_match_the_reference(k: int) -> None:
    c = _UNEVEN_META["cases"][k]
    p = case_plan(c, _UNEVEN_META["streams"], batch_size=4)
    check_rank_answers(p, _UNEVEN[str(k)].astype(np.int64), c["shape"], c["start"], nb_all=False)


_REDEAL, _REDEAL_META = _load("redeal")
# from the start and resumed at a whole global batch (72); at 37 see below
REDEAL_CASES = [
    k
    for k, c in enumerate(_REDEAL_META["cases"])
    if c["algo"] in ("py1e", "naive") and c["shuffle"] and c["start"] in (0, 72)
]


@pytest.mark.parametrize("k", REDEAL_CASES[:6])
def test_redeal_rank_answers_match_the_reference(k: int) -> None:
    c = _REDEAL_META["cases"][k]
    p = case_plan(c, _REDEAL_META["streams"], initial_physical_nodes=c["initial_physical_nodes"])
    check_rank_answers(p, _REDEAL[str(k)].astype(np.int64), c["shape"], c["start"], nb_all=True)


@pytest.mark.parametrize("k", [k for k, c in enumerate(_REDEAL_META["cases"]) if c["start"] % 72])
def test_redeal_rank_answers_resumed_inside_a_global_batch(k: int) -> None:
    # the re-deal drops start rounded down to the initial nodes (not whole global batches):
    # each slot's position is where its sample sits in the sequence from the epoch's start
    c = _REDEAL_META["cases"][k]
    assert c["start"] % (c["batch"] * c["shape"][0] * c["shape"][1])  # inside a global batch
    p = case_plan(c, _REDEAL_META["streams"], initial_physical_nodes=c["initial_physical_nodes"])
    check_rank_answers(p, _REDEAL[str(k)].astype(np.int64), c["shape"], c["start"], nb_all=True)


@pytest.mark.parametrize("k", [k for k, c in enumerate(_REDEAL_META["cases"]) if not c["start"]])
def test_redeal_from_the_start_reads_each_global_batch_rank_by_rank(k: int) -> None:
    # from the start, rank r's batch j is slice r of global batch j: the same positions as
    # every other reference plan's, whatever the initial World's layout was
    c = _REDEAL_META["cases"][k]
    p = case_plan(c, _REDEAL_META["streams"], initial_physical_nodes=c["initial_physical_nodes"])
    world = World(*c["shape"])
    bs, ranks = c["batch"], world.num_ranks
    want = _REDEAL[str(k)].astype(np.int64)
    w = world.workers_per_rank
    for rank in range(ranks):
        per = want[rank // world.ranks_per_node, rank % world.ranks_per_node]
        for j in range(w * per.shape[1]):
            slots = np.flatnonzero(per[j % w, j // w] >= 0)  # -1: a slot with no sample
            got = p.rank_positions(world, rank, j).tolist()
            assert got == ((j * ranks + rank) * bs + slots).tolist(), (rank, j)


def test_redeal_answers_follow_each_world_and_start_in_turn() -> None:
    # one plan asked for two resume positions and two Worlds in turn: each answer is that
    # (World, start)'s, never the previous one's
    first = {
        (c["initial_physical_nodes"], tuple(c["shape"]), c["start"]): k
        for k, c in reversed(list(enumerate(_REDEAL_META["cases"])))
        if c["algo"] == "py1e" and c["shuffle"] and c["streams"] == "odd"
    }
    ks = [first[(2, (3, 2, 2), 0)], first[(2, (3, 2, 2), 72)], first[(2, (3, 2, 2), 0)]]
    c = _REDEAL_META["cases"][ks[0]]
    p = case_plan(c, _REDEAL_META["streams"], initial_physical_nodes=2)
    for k in ks:
        c = _REDEAL_META["cases"][k]
        check_rank_answers(p, _REDEAL[str(k)].astype(np.int64), c["shape"], c["start"], True)


def test_redeal_reads_minus_one_where_the_reference_has_no_sample() -> None:
    k = next(
        k
        for k, c in enumerate(_REDEAL_META["cases"])
        if c["algo"] == "py1e" and c["shuffle"] and c["start"] == 0
    )
    c = _REDEAL_META["cases"][k]
    want = _REDEAL[str(k)].astype(np.int64)
    p = case_plan(c, _REDEAL_META["streams"], initial_physical_nodes=c["initial_physical_nodes"])
    world = World(*c["shape"])
    for w in range(world.workers_per_rank):
        assert all(b.dtype == np.int64 for b in p.worker_batches(world, 0, w))
    ids = p.ids_at(np.arange(3 * want.size, dtype=np.int64))
    assert ids.dtype == np.int64
    # the re-deal's sequence: the golden's samples, and -1 for its padding (never another)
    assert set(ids.tolist()) == set(want[want >= 0].tolist()) | {-1}


def test_redeal_refusal_names_the_partition() -> None:
    # 3 nodes of 1 rank, batch 1: a global batch of 3 cannot be cut for the initial 2 ranks
    c = dict(next(c for c in _REDEAL_META["cases"] if c["shape"] == [3, 1, 1]), ncn=2)
    p = case_plan(c, _REDEAL_META["streams"], initial_physical_nodes=2, batch_size=1)
    want = r"^partition_algo='relaxed': global batch 3 is not a multiple of the initial 2 ranks$"
    with pytest.raises(ConfigError, match=want):
        p.rank_num_samples(World(3, 1, 1), 0)


def test_work_plan_without_a_batch_reads_minus_one() -> None:
    # stratified shares of 16 + 16 of a global batch of 32, but 4 samples per stream: no
    # global batch at all; every position reads -1, as int64 whatever the positions' dtype
    streams = [StreamSpec(np.array([6, 4], np.int64), proportion=0.5) for _ in range(2)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = plan_epoch(
            streams, seed=1, epoch=0, num_canonical_nodes=1, batch_size=32, shuffle=True,
            shuffle_algo="py1e", epoch_size=8, batching_method="stratified",
            global_batch_size=32,
        )  # fmt: skip
        assert p.num_samples == 0
        assert p.padded_num_samples(World(1, 1, 1)) == 0
        got = p.ids_at(np.array([0, 5, 40], np.int32))
    assert got.dtype == np.int64 and got.tolist() == [-1, -1, -1]


# -- unshuffled under "astream": _UnshuffledPlan ---------------------------------------------


def test_unshuffled_resampled_plan_bounds_locality_by_its_shards() -> None:
    # a stream resampled (choose): the ids go through a table, so no SubPlan; the locality
    # bound is then every shard, as the reference's plans
    p = plan_epoch(
        [StreamSpec(np.array([5, 7, 3], np.int64), choose=9)], seed=2, epoch=0,
        num_canonical_nodes=1, batch_size=2, shuffle=False,
    )  # fmt: skip
    assert p.reference is True and p.locality_bound() == 3
    whole = plan_epoch(
        [StreamSpec(np.array([5, 7, 3], np.int64))], seed=2, epoch=0, num_canonical_nodes=1,
        batch_size=2, shuffle=False, shuffle_block_size=4,
    )  # fmt: skip
    assert whole.reference is False  # index order itself: a SubPlan, its own bound
    assert whole.locality_bound() == EpochPlan.locality_bound(whole)


def test_unshuffled_plan_deals_unwidened_where_the_reference_cannot_widen() -> None:
    # 3 samples, 1 canonical node, 4 physical nodes: the reference cannot widen 3 positions
    # to split over 4 nodes; astream deals the 3 as they are, and the fourth rank repeats
    # sample 0 (start + slot mod samples left, as the reference tiles an empty node)
    p = plan_epoch(
        [StreamSpec(np.array([3], np.int64))], seed=0, epoch=0, num_canonical_nodes=1,
        batch_size=1, shuffle=False,
    )  # fmt: skip
    world = World(4, 1, 1)
    assert p.padded_num_samples(world) == 4
    got = [[b.tolist() for b in p.worker_batches(world, r, 0)] for r in range(4)]
    assert got == [[[0]], [[1]], [[2]], [[0]]]
    assert [p.ids_at(p.rank_positions(world, r, 0)).tolist() for r in range(4)] == [
        [0], [1], [2], [0]
    ]  # fmt: skip


# -- the reference's random batching: history, wrap-around, refusals --------------------------


def test_answers_after_a_redeal_are_those_of_a_fresh_plan() -> None:
    # a plan that re-dealt for 3 nodes, then asked about 2 nodes (which divide its 2
    # canonical nodes), answers as a plan that never re-dealt
    k = REDEAL_CASES[0]
    c = _REDEAL_META["cases"][k]
    args = dict(initial_physical_nodes=c["initial_physical_nodes"])
    used, fresh = (case_plan(c, _REDEAL_META["streams"], **args) for _ in range(2))
    used.rank_num_samples(World(*c["shape"]), 0)  # the re-deal
    world = World(2, 2, 2)
    assert used.padded_num_samples(world) == fresh.padded_num_samples(world)
    for rank in range(world.num_ranks):
        pos = used.rank_positions_span(world, rank, 0, 100)
        assert pos.tolist() == fresh.rank_positions_span(world, rank, 0, 100).tolist()
        assert used.ids_at(pos).tolist() == fresh.ids_at(pos).tolist()
        assert used.rank_num_samples(world, rank) == fresh.rank_num_samples(world, rank)


def test_reference_positions_past_the_end_wrap_around() -> None:
    c = _UNEVEN_META["cases"][RANDOM_CASES[0]]
    p = case_plan(c, _UNEVEN_META["streams"], batch_size=4)
    n = p.num_samples
    assert n == 204  # 2 canonical nodes of 102 (203 samples, one short node)
    near = np.array([0, 1, 5, n - 1], np.int64)
    assert p.ids_at(near + n).tolist() == p.ids_at(near).tolist()
    assert p.ids_at(near + 3 * n).tolist() == p.ids_at(near).tolist()
    # far positions read their remainder mod n (n + p would overflow int64)
    far = np.array([2**63 - 1, 2**63 - 7], np.int64)
    want = p.ids_at(np.array([(int(q) - n) % n for q in far], np.int64)).tolist()
    assert p.ids_at(far).tolist() == want
    assert p.ids_at(np.array([n], np.int32)).dtype == np.int64
    # one canonical node dealt to one node: 203 positions, position 203 reads position 0
    one = case_plan(dict(c, ncn=1), _UNEVEN_META["streams"], batch_size=4)
    assert one.padded_num_samples(World(1, 2, 1)) == 204  # 203 and one pad
    assert one.num_samples == 203
    assert one.ids_at(np.array([203, 204], np.int64)).tolist() == one.ids_at(near[:2]).tolist()


def test_reference_refusals_say_why() -> None:
    c = _UNEVEN_META["cases"][RANDOM_CASES[0]]
    p = case_plan(c, _UNEVEN_META["streams"], batch_size=4)
    want = (
        "num_canonical_nodes=2 is incompatible with num_nodes=3: one must divide the other "
        "under a reference shuffle_algo (as mosaicml-streaming's 'relaxed' partition of a fresh "
        "epoch; resuming, 'relaxed' re-deals the initial World's order when given "
        "initial_physical_nodes)"
    )
    with pytest.raises(ConfigError) as err:
        p.padded_num_samples(World(3, 1, 1))
    assert str(err.value) == want
    # 3 samples on 1 canonical node cannot be widened to split over 4 physical nodes
    tiny = plan_epoch(
        [StreamSpec(np.array([3], np.int64))], seed=0, epoch=0, num_canonical_nodes=1,
        batch_size=1, shuffle=True, shuffle_algo="py1e",
    )  # fmt: skip
    with pytest.raises(ConfigError) as err:
        list(tiny.worker_batches(World(4, 1, 1), 0, 0))
    assert str(err.value) == (
        "the reference cannot pad 3 samples over 1 canonical nodes for 4 physical nodes "
        "(too few samples per canonical node)"
    )


# (shard sizes, canonical nodes, initial nodes, World, batch size): the re-deal's own answers
# agree with each other on Worlds and resume positions the goldens do not reach, among them
# fewer canonical than initial nodes (a padded layout) and every start up to two global batches
_REDEALS = [
    ([7, 130, 1, 65], 2, 2, (3, 2, 2), 4),
    ([7, 130, 1, 66], 2, 4, (3, 2, 1), 4),  # 204 samples: 51 a node of 4, padded to 52
    ([50, 51], 2, 4, (3, 1, 2), 4),
    ([29], 2, 1, (3, 1, 1), 2),
]


@pytest.mark.parametrize("case", range(len(_REDEALS)))
def test_redeal_positions_read_what_the_workers_read_from_every_start(case: int) -> None:
    sizes, ncn, initial, shape, bs = _REDEALS[case]
    world = World(*shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = plan_epoch(
            [StreamSpec(np.array(sizes, np.int64))], seed=5, epoch=1, num_canonical_nodes=ncn,
            batch_size=bs, shuffle=True, shuffle_algo="py1s", partition_algo="relaxed",
            initial_physical_nodes=initial,
        )  # fmt: skip
    gbs = bs * world.num_ranks
    w = world.workers_per_rank
    starts = [s for s in [*range(2 * gbs + 1), 5 * gbs + 1] if s < sum(sizes)]
    for start in [*starts, 0]:  # one plan asked in turn
        for rank in range(world.num_ranks):
            per = [list(p.worker_batches(world, rank, k, start)) for k in range(w)]
            got = []
            j = 0
            while j < w * len(per[0]) or j < w * len(per[-1]):
                if j // w < len(per[j % w]):
                    pos = p.rank_positions(world, rank, j, start)
                    got.append((p.ids_at(pos).tolist(), per[j % w][j // w].tolist()))
                j += 1
            for have, want in got:
                assert have == want, (start, rank)
            span = p.rank_positions_span(world, rank, 0, j, start)
            assert p.ids_at(span).tolist() == [x for k in range(j) for x in _row(per, k, w)]


def _row(per: list[list[np.ndarray]], j: int, w: int) -> list[int]:
    return per[j % w][j // w].tolist() if j // w < len(per[j % w]) else []


def test_redeal_ids_follow_the_world_asked_even_when_its_rank_is_refused() -> None:
    sizes, ncn, initial, shape, bs = _REDEALS[0]
    p = plan_epoch(
        [StreamSpec(np.array(sizes, np.int64))], seed=5, epoch=1, num_canonical_nodes=ncn,
        batch_size=bs, shuffle=True, shuffle_algo="py1s", partition_algo="relaxed",
        initial_physical_nodes=initial,
    )  # fmt: skip
    world = World(*shape)
    pos = p.rank_positions(world, 1, 3)
    want = p.ids_at(pos).tolist()
    fresh = plan_epoch(
        [StreamSpec(np.array(sizes, np.int64))], seed=5, epoch=1, num_canonical_nodes=ncn,
        batch_size=bs, shuffle=True, shuffle_algo="py1s", partition_algo="relaxed",
        initial_physical_nodes=initial,
    )  # fmt: skip
    with pytest.raises(ConfigError):
        fresh.rank_num_samples(world, world.num_ranks)  # no such rank: nothing dealt yet
    assert fresh.ids_at(pos).tolist() == want


@pytest.mark.parametrize("sizes", [[[7, 130, 1, 65]], [[5, 6], [9, 1, 4]], [[12]]])
@pytest.mark.parametrize("ncn", [1, 2, 3])
def test_unshuffled_layout_reads_in_shard_runs_the_same_ids(sizes, ncn) -> None:
    # shuffle=False under astream's algorithm: the plan also carries the layout as a SubPlan
    # (the planner reads it in shard runs); both must name the same sample at each position
    streams = [StreamSpec(np.array(s, np.int64)) for s in sizes]
    p = plan_epoch(streams, seed=3, epoch=2, num_canonical_nodes=ncn, batch_size=4,
                   shuffle=False, shuffle_algo="astream")  # fmt: skip
    assert not p.reference and len(p._subs) == 1
    pos = np.arange(p.num_samples, dtype=np.int64)
    got = p._subs[0].ids_at(pos)
    assert got.tolist() == p.ids_at(pos).tolist()
    n = sum(map(sum, sizes))
    assert sorted(set(got.tolist())) == list(range(n))  # index order: every sample, padded


@pytest.mark.parametrize(("ncn", "nodes"), [(2, 4), (2, 2), (4, 2), (1, 3)])
def test_initial_nodes_change_nothing_on_a_world_the_canonical_nodes_divide(ncn, nodes) -> None:
    # the re-deal is only for Worlds whose nodes and canonical nodes do not divide each other
    def plan(**kw: object) -> EpochPlan:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return plan_epoch(
                [StreamSpec(np.array([7, 130, 1, 65], np.int64))], seed=3, epoch=1,
                num_canonical_nodes=ncn, batch_size=4, shuffle=True, shuffle_algo="py1s",
                partition_algo="relaxed", **kw,
            )  # fmt: skip

    a, b = plan(initial_physical_nodes=2), plan()
    world = World(nodes, 2, 2)
    for start in (0, 37):
        for rank in range(world.num_ranks):
            for j in range(4):
                pa = a.rank_positions(world, rank, j, start)
                assert pa.tolist() == b.rank_positions(world, rank, j, start).tolist()
                assert a.ids_at(pa).tolist() == b.ids_at(pa).tolist()


def test_before_any_world_ids_read_the_layout_of_up_to_ncn_nodes() -> None:
    # one canonical node, 7 samples: the unwidened layout (7 positions, then again), not the
    # one widened for two nodes (8 positions, the last repeating a sample)
    p = plan_epoch(
        [StreamSpec(np.array([3, 4], np.int64))], seed=3, epoch=0, num_canonical_nodes=1,
        batch_size=2, shuffle=False, shuffle_algo="py1e",
    )  # fmt: skip
    assert p.num_samples == 7
    assert p.ids_at(np.arange(16, dtype=np.int64)).tolist() == [*range(7), *range(7), 0, 1]


def test_work_plans_answer_from_the_epochs_start_by_default() -> None:
    # no start given: no resume, so no warning that a resume rounds down to a global batch
    c = _BATCHING_META["cases"][0]
    p = case_plan(c, _BATCHING_META["streams"])
    world = World(*c["shape"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", message="shuffle_block_size is smaller")
        rows = [b.tolist() for b in p.worker_batches(world, 0, 0)]
        assert rows == [b.tolist() for b in p.worker_batches(world, 0, 0, 0)]
        assert p.padded_num_samples(world) == p.padded_num_samples(world, 0)


@pytest.mark.parametrize(("shuffle", "choose"), [(True, None), (True, 150), (False, 150)])
def test_the_id_table_is_int32_while_ids_fit(shuffle: bool, choose: int | None) -> None:
    # the table holds one id per position: 4 bytes each while they fit (half the reference's),
    # shuffled or resampled alike; the ids read through it are int64
    s = StreamSpec(np.array([7, 130, 1, 65], np.int64), choose=choose)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = plan_epoch([s], seed=3, epoch=1, num_canonical_nodes=2, batch_size=4,
                       shuffle=shuffle, shuffle_algo="py1s")  # fmt: skip
    assert p._table is not None and p._table.dtype == np.int32
    ids = p.ids_at(np.arange(p.num_samples, dtype=np.int64))
    assert ids.dtype == np.int64 and ids.max() == p._table.max() and ids.max() > 62
