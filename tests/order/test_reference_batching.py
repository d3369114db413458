"""The reference's batching methods under its algorithms: ``stratified``, ``per_stream`` and
``device_per_stream`` over three streams (absolute ``choose`` weights, and relative
``proportion`` weights with an ``epoch_size``), every algorithm and unshuffled, canonical nodes
1/2/4, 1x1x1, 1x2x2, 2x2x2, both epochs, and resumed: every (node, rank, worker) gets exactly
the batches mosaicml-streaming 0.13.0 deals it (goldens: scripts/gen_mosaic_order_golden.py,
``batching.npz``)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from astream.core.world import World
from astream.errors import ConfigError

from .test_reference_uneven import assert_reference_batches, case_plan

GOLDEN = os.path.join(os.path.dirname(__file__), "golden", "mosaic", "batching.npz")
_DATA = np.load(GOLDEN)
_META = json.loads(str(_DATA["cases"]))
CASES = list(enumerate(_META["cases"]))
pytestmark = pytest.mark.filterwarnings("ignore:shuffle_block_size is smaller")


def _id(case: tuple[int, dict]) -> str:
    _k, c = case
    algo = c["algo"] if c["shuffle"] else "noshuffle"
    shape = "x".join(map(str, c["shape"]))
    return (
        f"{c['batching_method']}-{algo}-cn{c['ncn']}-{shape}-{c['streams']}-e{c['epoch']}"
        f"-at{c['start']}"
    )


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_batching_methods_as_the_reference(case: tuple[int, dict]) -> None:
    k, c = case
    pn, rpn, _w = c["shape"]
    gbs = c["batch"] * pn * rpn
    p = case_plan(c, _META["streams"], global_batch_size=gbs)
    assert_reference_batches(p, _DATA[str(k)].astype(np.int64), c["shape"], c["start"])


def test_batching_matrix_is_covered() -> None:
    seen = {(c["batching_method"], c["algo"], c["shuffle"]) for _, c in CASES}
    assert len(seen) == 3 * 6
    assert {c["streams"] for _, c in CASES} == {"three_choose", "three_prop"}


def test_reference_refusals_are_config_errors() -> None:
    """What the reference refuses raises ConfigError naming the method: a stream whose share
    of the global batch rounds to 0 (stratified), canonical nodes not divisible by the nodes
    (device_per_stream), a global_batch_size that is not the World's."""
    c = dict(CASES[0][1], batching_method="stratified", batch=1)
    share = r"^batching_method='stratified': streams\[\d\]: its share"
    with pytest.raises(ConfigError, match=share):
        case_plan(c, _META["streams"], batch_size=1).worker_batches(World(1, 1, 1), 0, 0)
    c = dict(CASES[0][1], batching_method="device_per_stream", ncn=1)
    p = case_plan(c, _META["streams"])
    with pytest.raises(ConfigError, match="device_per_stream needs num_canonical_nodes"):
        p.worker_batches(World(2, 1, 1), 0, 0)
    c = dict(CASES[0][1], batching_method="per_stream")
    p = case_plan(c, _META["streams"], global_batch_size=64)
    with pytest.raises(ConfigError, match="global_batch_size=64 differs from batch_size x ranks"):
        p.worker_batches(World(1, 2, 1), 0, 0)


_REDEAL = np.load(
    os.path.join(os.path.dirname(__file__), "golden", "mosaic", "batching_redeal.npz")
)
_REDEAL_META = json.loads(str(_REDEAL["cases"]))
REDEAL_CASES = list(enumerate(_REDEAL_META["cases"]))


@pytest.mark.parametrize("case", REDEAL_CASES, ids=[_id(c) for c in REDEAL_CASES])
def test_batching_methods_resumed_on_a_world_that_needs_a_redeal(case: tuple[int, dict]) -> None:
    # per_stream partitions each stream on the World's nodes: 3 or 6 nodes after 2 or 4, with
    # the checkpoint's initial_physical_nodes, re-dealt as the reference re-deals
    # (scripts/gen_mosaic_batching_redeal_golden.py); stratified partitions for one node
    k, c = case
    p = case_plan(c, _REDEAL_META["streams"], initial_physical_nodes=c["initial_physical_nodes"])
    want = _REDEAL[str(k)].astype(np.int64)
    assert_reference_batches(p, want, c["shape"], c["start"])
    world = World(*c["shape"])
    assert np.array_equal(p._work(world, c["start"]), want)  # fillers (-1) where the reference's
