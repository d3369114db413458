"""Reference shuffle algorithms through plan_epoch: every (node, rank, worker) gets exactly the
batches mosaicml-streaming 0.13.0 deals it (goldens: scripts/gen_mosaic_order_golden.py)."""

from __future__ import annotations

import json
import os
import warnings

import numpy as np
import pytest

from astream.core.order import StreamSpec, plan_epoch
from astream.core.world import World

GOLDEN = os.path.join(os.path.dirname(__file__), "golden", "mosaic", "world.npz")
_DATA = np.load(GOLDEN)
_META = json.loads(str(_DATA["cases"]))
CASES = list(enumerate(_META["cases"]))
DEFAULT_BLOCK = {1: 4_000_000, 2: 2_000_000, 8: 500_000}


def _id(case: tuple[int, dict]) -> str:
    _k, c = case
    algo = c["algo"] if c["shuffle"] else "noshuffle"
    shape = "x".join(map(str, c["shape"]))
    return f"{algo}-cn{c['ncn']}-{shape}-e{c['epoch']}-{c['streams']}-{c['partition_algo']}"


def reference_plan(c: dict, **kw: object):
    streams = [StreamSpec(np.array(s, np.int64)) for s in _META["streams"][c["streams"]]]
    # the cases with 2 canonical nodes use the reference's default block: leave it unset here
    block = None if c["block"] == DEFAULT_BLOCK[2] and c["ncn"] == 2 else c["block"]
    args: dict[str, object] = dict(
        seed=c["seed"],
        epoch=c["epoch"],
        num_canonical_nodes=c["ncn"],
        batch_size=4,
        shuffle=c["shuffle"],
        shuffle_algo=c["algo"],
        shuffle_block_size=block,
        partition_algo=c["partition_algo"],
    )
    args.update(kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return plan_epoch(streams, **args)  # type: ignore[arg-type]


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_every_worker_gets_the_reference_batches(case: tuple[int, dict]) -> None:
    k, c = case
    want = _DATA[str(k)].astype(np.int64)
    pn, rpn, workers = c["shape"]
    world = World(pn, rpn, workers)
    p = reference_plan(c)
    for rank in range(pn * rpn):
        for w in range(workers):
            ref = [[int(x) for x in b if x != -1] for b in want[rank // rpn, rank % rpn, w]]
            ref = [b for b in ref if b]
            got = [b.tolist() for b in p.worker_batches(world, rank, w, 0)]
            assert got == ref, (rank, w)


def test_matrix_is_covered() -> None:
    seen = {(c["algo"], c["ncn"], tuple(c["shape"]), c["epoch"], c["streams"]) for _, c in CASES}
    assert len(seen) == 5 * 3 * 3 * 2 * 2
    assert sum(not c["shuffle"] for _, c in CASES) == 3 * 3 * 2 * 2
