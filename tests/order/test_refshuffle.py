"""astream.core.refshuffle against the reference's own shuffles (goldens from 0.13.0).

The fixture is written by scripts/gen_mosaic_order_golden.py, which runs the reference's
``get_shuffle`` in /work/peervenv; every case must match position for position.
"""

from __future__ import annotations

import json
import os
import warnings

import numpy as np
import pytest

from astream.core import refshuffle

GOLDEN = os.path.join(os.path.dirname(__file__), "golden", "mosaic", "shuffle.npz")
_DATA = np.load(GOLDEN)
_META = json.loads(str(_DATA["cases"]))
CASES = list(enumerate(_META["cases"]))


def _id(case: tuple[int, dict]) -> str:
    _k, c = case
    return f"{c['algo']}-cn{c['ncn']}-{c['shards']}-b{c['block']}-e{c['epoch']}"


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_matches_reference_order(case: tuple[int, dict]) -> None:
    k, c = case
    sizes = _META["shards"][c["shards"]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = refshuffle.get_shuffle(c["algo"], sizes, c["ncn"], c["seed"], c["epoch"], c["block"])
    want = _DATA[str(k)].astype(np.int64)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want)


def test_golden_covers_matrix() -> None:
    seen = {(c["algo"], c["ncn"], c["epoch"]) for _, c in CASES}
    algos = set(refshuffle.REFERENCE_ALGOS)
    assert algos == {"py1e", "py1br", "py1s", "py2s", "naive"}
    assert seen == {(a, n, e) for a in algos for n in (1, 2, 8) for e in (0, 1)}


def test_every_order_is_a_permutation_and_epochs_differ() -> None:
    sizes = [5, 40, 3, 70, 22]
    for algo in refshuffle.REFERENCE_ALGOS:
        e0 = refshuffle.get_shuffle(algo, sizes, 2, 7, 0, 100)
        e1 = refshuffle.get_shuffle(algo, sizes, 2, 7, 1, 100)
        assert sorted(e0.tolist()) == list(range(140))
        assert e0.tolist() != e1.tolist()


def test_unknown_algorithm_is_refused() -> None:
    with pytest.raises(ValueError, match="'py1b' is not an algorithm of the reference"):
        refshuffle.get_shuffle("py1b", [10], 1, 0, 0)


def test_py1e_warns_when_block_smaller_than_shard() -> None:
    with pytest.warns(UserWarning, match="shuffle_block_size is smaller than some shards"):
        refshuffle.get_shuffle("py1e", [100, 100], 1, 0, 0, 40)


def test_reference_defaults() -> None:
    assert refshuffle.default_num_canonical_nodes("py1e", 3) == 3
    assert refshuffle.default_num_canonical_nodes("py1s", 3) == 192
    assert refshuffle.default_num_canonical_nodes("py2s", 1) == 64
    assert refshuffle.default_block_size(1) == 4_000_000
    assert refshuffle.default_block_size(8) == 500_000
    assert refshuffle.default_block_size(64) == 1 << 18
