"""Fidelity to mosaicml-streaming 0.13.0, against outputs recorded from it.

tests/order/golden/*.json come from scripts/gen_order_golden.py, which runs the reference.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from astream.core.order import StreamSpec, plan_epoch
from astream.core.world import World

from .helpers import plan, round_robin

GOLDEN = Path(__file__).parent / "golden"
PARTITIONS = json.loads((GOLDEN / "partitions.json").read_text())["cases"]
INDEX_ORDER = json.loads((GOLDEN / "index_order.json").read_text())["cases"]


def _name(c: dict) -> str:
    keys = ("num_samples", "num_canonical_nodes", "num_nodes", "ranks_per_node")
    more = ("workers_per_rank", "batch_size", "start")
    return "-".join(str(c[k]) for k in keys + more)


@pytest.mark.parametrize("case", PARTITIONS, ids=_name)
def test_every_rank_yields_the_reference_batches(case):
    """Unshuffled, a position is its sample id: each rank's batches, in DataLoader order, with
    the reference's padding (which samples, and how many) and partial last batches."""
    p = plan(
        [case["num_samples"]],
        num_canonical_nodes=case["num_canonical_nodes"],
        batch_size=case["batch_size"],
        shuffle=False,
    )
    world = World(case["num_nodes"], case["ranks_per_node"], case["workers_per_rank"])
    start = case["start"]
    for rank, want in enumerate(case["rank_batches"]):
        got = [b.tolist() for b in round_robin(p, world, rank, start)]
        assert got == want, rank
        assert p.rank_num_samples(world, rank, start) == sum(len(b) for b in want)
    assert p.padded_num_samples(world, start) == sum(
        len(b) for r in case["rank_batches"] for b in r
    )


def test_one_rank_yields_exactly_the_epoch():
    """The issue's case: 50,000 samples at batch 32 on one rank, 2 workers: 1563 batches, the
    last one of 16, no sample twice (it used to pad 16 repeats); a resumed epoch too."""
    p = plan([20_000, 30_000], batch_size=32, shuffle=True, seed=3)
    world = World(1, 1, 2)
    batches = list(round_robin(p, world, 0))
    assert len(batches) == 1563 and [len(b) for b in batches[-2:]] == [32, 16]
    ids = np.concatenate(batches)
    assert len(ids) == 50_000 == p.rank_num_samples(world, 0)
    assert sorted(ids.tolist()) == list(range(50_000))
    resumed = np.concatenate(list(round_robin(p, world, 0, 49_000)))
    assert resumed.tolist() == ids[49_000:].tolist()


def index_ordered(ids: list[int], sizes: list[int]) -> Counter[int]:
    """Assert ``ids`` is in index order (shard by shard; inside a shard its full copies, then
    its partial picks ascending); return the per-shard counts."""
    ends = np.cumsum(sizes)
    shard = np.searchsorted(ends, ids, side="right")
    assert (np.diff(shard) >= 0).all(), "shards out of order"
    counts: Counter[int] = Counter(shard.tolist())
    for s, c in counts.items():
        mine = [i for i, k in zip(ids, shard.tolist()) if k == s]
        full = list(range(int(ends[s]) - sizes[s], int(ends[s])))
        q = c // sizes[s]
        assert mine[: q * sizes[s]] == full * q
        rest = mine[q * sizes[s] :]
        assert rest == sorted(set(rest)), "partial picks not ascending"
    return counts


@pytest.mark.parametrize(
    "case", INDEX_ORDER, ids=lambda c: f"{c['shard_sizes']}-{c['choose']}-{c['sampling_method']}"
)
def test_unshuffled_partial_draws_come_in_index_order(case):
    sizes, method = case["shard_sizes"], case["sampling_method"]
    ref_counts = [index_ordered(e, sizes) for e in case["epochs"]]
    ours = []
    for epoch in range(len(case["epochs"])):
        p = plan_epoch(
            [StreamSpec(np.array(sizes, np.int64), choose=case["choose"])],
            seed=9,
            epoch=epoch,
            num_canonical_nodes=1,
            batch_size=1,
            shuffle=False,
            sampling_method=method,
            sampling_granularity=case["granularity"],
        )
        ours.append(p.global_ids(0, p.num_samples).tolist())
    our_counts = [index_ordered(e, sizes) for e in ours]
    # as the reference: how many samples each shard gives never changes between epochs ...
    assert all(c == ref_counts[0] for c in ref_counts)
    assert all(c == our_counts[0] for c in our_counts)
    assert sum(our_counts[0].values()) == case["choose"]
    # ... and which samples inside a shard does only with "balanced"
    if method == "fixed":
        assert all(e == case["epochs"][0] for e in case["epochs"])
        assert all(e == ours[0] for e in ours)
    else:
        assert len({tuple(e) for e in case["epochs"]}) > 1
        assert len({tuple(e) for e in ours}) > 1


def test_unshuffled_mixed_streams_and_strata_are_in_index_order():
    specs = [
        StreamSpec(np.array([9, 4, 11], np.int64), proportion=0.3),
        StreamSpec(np.array([6, 6], np.int64), proportion=0.7),
    ]
    kw = dict(seed=1, epoch=2, num_canonical_nodes=1, shuffle=False, epoch_size=30)
    p = plan_epoch(specs, batch_size=4, **kw)
    g = p.global_ids(0, p.num_samples).tolist()
    assert [i < 24 for i in g] == [True] * 9 + [False] * 21  # stream by stream
    index_ordered([i for i in g if i < 24], [9, 4, 11])
    index_ordered([i - 24 for i in g if i >= 24], [6, 6])
    s = plan_epoch(specs, batch_size=2, batching_method="stratified", global_batch_size=10, **kw)
    g = s.global_ids(0, s.num_samples).tolist()
    for j in range(0, len(g), 10):  # each stratum: 3 of stream 0, then 7 of stream 1
        assert [i < 24 for i in g[j : j + 10]] == [True] * 3 + [False] * 7
    index_ordered([i for i in g if i < 24], [9, 4, 11])
    index_ordered([i - 24 for i in g if i >= 24], [6, 6])


PER_STREAM = json.loads((GOLDEN / "per_stream.json").read_text())["cases"]


def _batches_by_stream(case, rank_batches, by_node):
    """Each stream's batches in yield order: per_stream, each global batch as the tuple of its
    rank batches; device_per_stream, each device batch (keyed by node when ``by_node``)."""
    ends = np.cumsum(case["stream_sizes"])
    rpn = case["ranks_per_node"]
    out: dict[tuple[int, int], list] = {}
    if case["batching_method"] == "per_stream":
        for j in range(len(rank_batches[0])):
            batch = tuple(tuple(r[j]) for r in rank_batches)
            s = {int(x) for x in np.searchsorted(ends, sum(batch, ()), side="right")}
            assert len(s) == 1
            out.setdefault((0, s.pop()), []).append(batch)
        return out
    for rank, batches in enumerate(rank_batches):
        for b in batches:
            s = {int(x) for x in np.searchsorted(ends, b, side="right")}
            assert len(s) == 1
            out.setdefault((rank // rpn if by_node else 0, s.pop()), []).append(tuple(b))
    return {k: sorted(v) for k, v in out.items()}


@pytest.mark.parametrize(
    "case",
    PER_STREAM,
    ids=lambda c: (
        f"{c['batching_method']}-{c['num_canonical_nodes']}-{c['num_nodes']}x"
        f"{c['ranks_per_node']}x{c['workers_per_rank']}-{c['batch_size']}"
    ),
)
def test_per_stream_batches_as_the_reference(case):
    """Unshuffled full streams: per_stream gives each stream's global batches, rank by rank,
    exactly as the reference (only the seeded interleave of the streams differs);
    device_per_stream the same device batches of each stream, and with one rank per node the
    same per physical node (the reference, with several ranks per node, hands a node's ranks
    device batches cut from other nodes' canonical nodes; astream keeps them on their own)."""
    world = World(case["num_nodes"], case["ranks_per_node"], case["workers_per_rank"])
    bs = case["batch_size"]
    p = plan_epoch(
        [StreamSpec(np.array([n], np.int64)) for n in case["stream_sizes"]],
        seed=4,
        epoch=0,
        num_canonical_nodes=case["num_canonical_nodes"],
        batch_size=bs,
        shuffle=False,
        batching_method=case["batching_method"],
        global_batch_size=bs * world.num_ranks,
    )
    ours = [[b.tolist() for b in round_robin(p, world, r)] for r in range(world.num_ranks)]
    ref = case["rank_batches"]
    assert [len(r) for r in ours] == [len(r) for r in ref]
    by_node = case["ranks_per_node"] == 1
    assert _batches_by_stream(case, ours, by_node) == _batches_by_stream(case, ref, by_node)
