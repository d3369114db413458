"""Resuming a reference-algorithm run on a World whose nodes and canonical nodes do not divide
one another: with the checkpoint's ``initial_physical_nodes``, astream re-deals the initial
World's order in global batches exactly as mosaicml-streaming 0.13.0's ``relaxed`` partition
does (goldens: scripts/gen_mosaic_order_golden.py, ``redeal.npz``: 3 nodes after 2 or 4, 6
after 4, from the start, at a whole global batch, and at 37)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from astream.core.world import World
from astream.errors import ConfigError

from .test_reference_uneven import assert_reference_batches, case_plan

GOLDEN = os.path.join(os.path.dirname(__file__), "golden", "mosaic", "redeal.npz")
_DATA = np.load(GOLDEN)
_META = json.loads(str(_DATA["cases"]))
CASES = list(enumerate(_META["cases"]))
pytestmark = pytest.mark.filterwarnings("ignore:shuffle_block_size is smaller")


def _id(case: tuple[int, dict]) -> str:
    _k, c = case
    algo = c["algo"] if c["shuffle"] else "noshuffle"
    shape = "x".join(map(str, c["shape"]))
    return (
        f"{algo}-cn{c['ncn']}-from{c['initial_physical_nodes']}-to{shape}-{c['streams']}"
        f"-at{c['start']}"
    )


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_relaxed_redeal_as_the_reference(case: tuple[int, dict]) -> None:
    k, c = case
    p = case_plan(c, _META["streams"], initial_physical_nodes=c["initial_physical_nodes"])
    assert_reference_batches(p, _DATA[str(k)].astype(np.int64), c["shape"], c["start"])


def test_redeal_needs_the_initial_world() -> None:
    c = CASES[0][1]
    p = case_plan(c, _META["streams"])  # no initial_physical_nodes: a fresh epoch
    with pytest.raises(ConfigError, match="num_canonical_nodes=2 is incompatible with num_nodes"):
        p.worker_batches(World(3, 2, 2), 0, 0)
    with pytest.raises(ConfigError, match=r"^initial_physical_nodes: only a reference"):
        case_plan(dict(c, algo="astream"), _META["streams"], initial_physical_nodes=2)
