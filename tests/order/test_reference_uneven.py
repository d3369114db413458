"""The reference's padding, reproduced: epochs that do not split evenly over the canonical
nodes, fewer canonical than physical nodes, resume positions that are not a multiple of the
physical nodes; every (node, rank, worker) gets exactly the batches mosaicml-streaming 0.13.0
deals it (goldens: scripts/gen_mosaic_order_golden.py, ``uneven.npz``)."""

from __future__ import annotations

import json
import os
import warnings

import numpy as np
import pytest

from astream.core.order import StreamSpec, plan_epoch
from astream.core.world import World
from astream.errors import ConfigError

GOLDEN = os.path.join(os.path.dirname(__file__), "golden", "mosaic", "uneven.npz")
_DATA = np.load(GOLDEN)
_META = json.loads(str(_DATA["cases"]))
CASES = list(enumerate(_META["cases"]))


def _id(case: tuple[int, dict]) -> str:
    _k, c = case
    algo = c["algo"] if c["shuffle"] else "noshuffle"
    shape = "x".join(map(str, c["shape"]))
    return f"{algo}-cn{c['ncn']}-{shape}-{c['streams']}-e{c['epoch']}-at{c['start']}"


def case_plan(c: dict, stream_sets: dict, **kw: object):
    spec = stream_sets[c["streams"]]
    chooses = spec["choose"] or [None] * len(spec["sizes"])
    props = spec.get("proportion") or [None] * len(spec["sizes"])
    streams = [
        StreamSpec(np.array(s, np.int64), choose=n, proportion=p)
        for s, n, p in zip(spec["sizes"], chooses, props)
    ]
    args: dict[str, object] = dict(
        epoch_size=spec.get("epoch_size"),
        seed=c["seed"],
        epoch=c["epoch"],
        num_canonical_nodes=c["ncn"],
        batch_size=c.get("batch", 4),
        shuffle=c["shuffle"],
        shuffle_algo=c["algo"],
        shuffle_block_size=c["block"],
        partition_algo=c["partition_algo"],
        batching_method=c.get("batching_method", "random"),
        sampling_method=c.get("sampling_method", "balanced"),
        sampling_granularity=c.get("granularity", 1),
    )
    args.update(kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return plan_epoch(streams, **args)  # type: ignore[arg-type]


def assert_reference_batches(p, want: np.ndarray, shape: list[int], start: int) -> None:
    pn, rpn, workers = shape
    world = World(pn, rpn, workers)
    for rank in range(pn * rpn):
        for w in range(workers):
            ref = [[int(x) for x in b if x != -1] for b in want[rank // rpn, rank % rpn, w]]
            got = [b.tolist() for b in p.worker_batches(world, rank, w, start)]
            assert got == [b for b in ref if b], (rank, w)


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_uneven_epochs_as_the_reference(case: tuple[int, dict]) -> None:
    k, c = case
    p = case_plan(c, _META["streams"])
    assert_reference_batches(p, _DATA[str(k)].astype(np.int64), c["shape"], c["start"])


def test_uneven_matrix_is_covered() -> None:
    seen = {(c["algo"], c["shuffle"], c["ncn"], tuple(c["shape"])) for _, c in CASES}
    # every canonical node count that does not divide the epochs (203, 485), NCN < num_nodes
    assert {(3, (1, 2, 2)), (8, (2, 2, 2)), (1, (4, 1, 2)), (2, (4, 1, 2))} <= {
        (n, s) for _a, _s, n, s in seen
    }
    assert all(203 % c["ncn"] or c["ncn"] == 1 for _, c in CASES)
    assert {c["start"] % c["shape"][0] for _, c in CASES if c["shape"][0] > 1} == {0, 1}


def test_reference_epoch_length_and_ranks() -> None:
    """203 samples over 8 canonical nodes: the reference's epoch is 8 x 26 = 208 positions
    (5 short nodes repeat their last sample); on 8x1x1 with 2 canonical nodes each node of 102
    is widened to 104 (so it splits over 4 physical nodes): 208 again, 26 per rank."""
    c = {"streams": "odd", "seed": 1, "epoch": 0, "ncn": 8, "shuffle": True, "algo": "py1e",
         "block": 60, "partition_algo": "relaxed"}  # fmt: skip
    p = case_plan(c, _META["streams"])
    assert p.num_samples == 208
    ids = p.global_ids(0, 208)
    assert sorted(set(ids.tolist())) == list(range(203))
    assert len(ids) - len(set(ids.tolist())) == 5
    p2 = case_plan(dict(c, ncn=2), _META["streams"])
    assert p2.num_samples == 204
    world = World(8, 1, 1)
    assert p2.padded_num_samples(world) == 208
    assert p2.rank_num_samples(world, 3) == 26
    # 2 canonical nodes and 3 physical ones divide neither way: the reference refuses it
    with pytest.raises(ConfigError, match="num_canonical_nodes=2 is incompatible with num_nodes=3"):
        p2.padded_num_samples(World(3, 1, 1))
