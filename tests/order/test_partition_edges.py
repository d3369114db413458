"""The reference's partition at its edges, against mosaicml-streaming 0.13.0
(golden/mosaic/partition_edges.json, from scripts/gen_mosaic_partition_edges_golden.py).

As many or fewer samples than canonical nodes (the tiled layout, more than one column wide on
more physical nodes than canonical ones), rows of unequal length, too few columns for the
ranks, resume positions that are not a multiple of the nodes or past the epoch, and the
"relaxed" re-deal of an initial World's partition. Each case is the whole work array, or the
reference's refusal: astream refuses the same cases, with its own message.
"""

from __future__ import annotations

import json
import os
import warnings

import numpy as np
import pytest

from astream.core import refbatching

EDGES = os.path.join(os.path.dirname(__file__), "golden", "mosaic", "partition_edges.json")

with open(EDGES) as _f:
    CASES = json.load(_f)["cases"]

# the reference's message -> astream's, for the same refusal
REFUSALS = {
    "Resuming further into the dataset": "past the epoch's",
    "could not broadcast input array": "the reference cannot pad",  # the reference crashes
    "A global batch size of": "is not a multiple of the initial",
}


def _partition(c: dict) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return refbatching.partition(
            c["algo"], c["n"], c["ncn"], c["pn"], c["rpn"], c["workers"], c["bs"], c["drop"],
            c["initial"],
        )  # fmt: skip


def test_the_table_reaches_each_edge() -> None:
    ok = [c for c in CASES if "error" not in c]
    assert len(CASES) == 2304 and len(ok) == 1416
    # fewer samples than canonical nodes on more nodes than canonical ones: tiled, wide rows
    assert any(c["n"] < c["ncn"] < c["pn"] for c in ok)
    assert any(c["n"] == c["ncn"] < c["pn"] for c in ok)
    assert any(c["drop"] % c["pn"] for c in ok)
    assert sum(c["algo"] == "relaxed" for c in ok) == 220
    refused = {k for c in CASES if "error" in c for k in REFUSALS if c["error"][1].startswith(k)}
    assert refused == set(REFUSALS)


@pytest.mark.parametrize("algo", ["orig", "relaxed"])
def test_partitions_match_the_reference(algo: str) -> None:
    for c in CASES:
        if c["algo"] != algo or "error" in c:
            continue
        got = _partition(c)
        assert got.dtype == np.int64, c
        assert list(got.shape) == c["shape"], c
        assert got.ravel().tolist() == c["ids"], c


def test_refusals_match_the_reference() -> None:
    for c in CASES:
        if "error" not in c:
            continue
        kind, message = c["error"]
        assert kind == "ValueError", c
        ours = next(v for k, v in REFUSALS.items() if message.startswith(k))
        with pytest.raises(ValueError, match=ours):
            _partition(c)


@pytest.mark.parametrize("algo", ["RELAXED", "", None])
def test_an_unknown_partition_algo_is_refused(algo: object) -> None:
    with pytest.raises(ValueError, match=r"^partition_algo=.*: the reference has 'orig' and"):
        refbatching.partition(algo, 12, 2, 3, 1, 1, 4, 0, 2)  # type: ignore[arg-type]


@pytest.mark.parametrize(("ncn", "nodes"), [(2, 3), (3, 2), (4, 6)])
def test_nodes_and_canonical_nodes_that_do_not_divide_are_refused(ncn: int, nodes: int) -> None:
    want = f"^num_canonical_nodes={ncn} and num_nodes={nodes}: one must divide the other$"
    with pytest.raises(ValueError, match=want):
        refbatching.partition("orig", 12, ncn, nodes, 1, 1, 4)
