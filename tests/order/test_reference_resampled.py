"""Reference shuffle algorithms over resampled streams (``choose``: upsampled with a partial
copy, downsampled, repeated twice): every worker gets the reference's batches."""

from __future__ import annotations

import json
import os
import warnings

import numpy as np
import pytest

from astream.core.order import StreamSpec, plan_epoch
from astream.core.world import World

GOLDEN = os.path.join(os.path.dirname(__file__), "golden", "mosaic", "resampled.npz")
_DATA = np.load(GOLDEN)
_META = json.loads(str(_DATA["cases"]))
CASES = list(enumerate(_META["cases"]))


def _id(case: tuple[int, dict]) -> str:
    _k, c = case
    shape = "x".join(map(str, c["shape"]))
    return f"{c['algo']}-cn{c['ncn']}-{shape}-e{c['epoch']}-{c['sampling_method']}"


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_resampled_streams_as_the_reference(case: tuple[int, dict]) -> None:
    k, c = case
    streams = [
        StreamSpec(np.array(s, np.int64), choose=n)
        for s, n in zip(_META["streams"][c["streams"]], c["choose"])
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = plan_epoch(
            streams, seed=c["seed"], epoch=c["epoch"], num_canonical_nodes=c["ncn"],
            batch_size=4, shuffle=True, shuffle_algo=c["algo"], shuffle_block_size=c["block"],
            sampling_method=c["sampling_method"], sampling_granularity=c["granularity"],
        )  # fmt: skip
    want = _DATA[str(k)].astype(np.int64)
    pn, rpn, workers = c["shape"]
    world = World(pn, rpn, workers)
    for rank in range(pn * rpn):
        for w in range(workers):
            ref = [[int(x) for x in b if x != -1] for b in want[rank // rpn, rank % rpn, w]]
            got = [b.tolist() for b in p.worker_batches(world, rank, w, 0)]
            assert got == [b for b in ref if b], (rank, w)
