"""What a wrong constant or a dropped argument in refshuffle.py would break beyond the main
golden orders (tests/order/test_refshuffle.py): the reference's orders, per-shard sampling and
resampling at their edges (golden/mosaic/shuffle_edges.json, from
scripts/gen_mosaic_shuffle_edges_golden.py), the index-order layout's edge cases, the id
dtype's boundary, empty inputs, py1e's warning and refusal, and get_shuffle's defaults.
"""

from __future__ import annotations

import json
import os
import sys
import warnings

import numpy as np
import pytest

from astream.core import refshuffle
from astream.errors import ConfigError

EDGES = os.path.join(os.path.dirname(__file__), "golden", "mosaic", "shuffle_edges.json")


def test_edge_orders_match_the_reference():
    """More canonical nodes than samples, zero- and one-sample shards, tiny blocks
    (scripts/gen_mosaic_shuffle_edges_golden.py): the reference's order, or its refusal."""
    cases = _edges()["cases"]
    assert len(cases) == 840
    for c in cases:
        args = (c["algo"], c["shards"], c["ncn"], c["seed"], c["epoch"], c["block"])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if "error" in c:  # the reference's ValueError; astream's is a ConfigError
                assert c["algo"] == "py1e" and c["error"][0] == "ValueError", c
                with pytest.raises(ConfigError, match="assigned to a canonical node is 0"):
                    refshuffle.get_shuffle(*args)
                continue
            got = refshuffle.get_shuffle(*args)
        assert got.tolist() == c["order"], c


def _edges() -> dict:
    with open(EDGES) as f:
        return json.load(f)  # type: ignore[no-any-return]


def test_per_shard_sampling_matches_the_reference():
    """Whole copies, remainders of 0, 1 and more, zero-sample shards, granularity wider than
    a shard, with and without the epoch in the seed."""
    cases = _edges()["sampling"]
    assert len(cases) == 240
    for c in cases:
        got = refshuffle.shard_choices(
            np.array(c["shards"], np.int64), c["choose"], c["granularity"], c["seed"],
            c["epoch"], c["use_epoch"],
        )  # fmt: skip
        assert got.tolist() == c["per_shard"], c


def test_resampling_matches_the_reference():
    """Shuffle units and index-order ids of several streams, fixed and balanced."""
    cases = _edges()["resampling"]
    assert len(cases) == 48
    for c in cases:
        units, ids = refshuffle.resample(
            [np.array(s, np.int64) for s in c["streams"]], c["chosen"], c["granularity"],
            c["seed"], c["epoch"], c["use_epoch"], c["balanced"],
        )  # fmt: skip
        assert (units.dtype, ids.dtype) == (np.int64, np.int64)
        assert (units.tolist(), ids.tolist()) == (c["units"], c["ids"]), c


def test_resampling_balanced_defaults_to_use_epoch():
    streams, chosen = [np.array([4, 6, 5], np.int64)], [9]
    for use_epoch in (False, True):
        got = refshuffle.resample(streams, chosen, 1, 3, 2, use_epoch)
        want = refshuffle.resample(streams, chosen, 1, 3, 2, use_epoch, use_epoch)
        assert [a.tolist() for a in got] == [a.tolist() for a in want]
    assert refshuffle.resample(streams, chosen, 1, 3, 2, False)[1].tolist() != (
        refshuffle.resample(streams, chosen, 1, 3, 2, False, True)[1].tolist()
    )


def test_resampling_nothing_gives_empty_int64_arrays():
    units, ids = refshuffle.resample([np.array([3, 0], np.int64)], [0], 1, 0, 0, True)
    assert (units.dtype, units.shape, ids.dtype, ids.shape) == (np.int64, (0,), np.int64, (0,))


# -- the reference's index-order layout ------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "ncn", "nodes", "layout"),
    [
        (10, 2, 2, (5, 5, 0)),  # as many canonical as physical nodes: no widening
        (10, 2, 1, (5, 5, 0)),
        (11, 2, 2, (6, 6, 0)),  # ceil(11 / 2)
        (10, 2, 4, (6, 5, 2)),  # 2 physical nodes per canonical node: L=5 widened to 6
        (11, 2, 4, (6, 6, 2)),  # already a multiple of 2
        (10, 3, 6, (4, 4, 2)),
        (10, 2, 6, (6, 5, 3)),  # widened to a multiple of 3
        (12, 2, 5, (6, 6, 2)),  # 5 // 2 = 2 physical nodes per canonical node
    ],
)
def test_canonical_layout(n, ncn, nodes, layout):
    assert refshuffle.canonical_layout(n, ncn, nodes) == layout


def test_canonical_layout_too_thin_to_pad_is_refused():
    # 2 samples per canonical node, widened to 3 for 3 physical nodes: nothing to repeat from
    with pytest.raises(ValueError) as e:
        refshuffle.canonical_index(4, 2, 6, np.arange(6, dtype=np.int64))
    assert str(e.value) == (
        "the reference cannot pad 4 samples over 2 canonical nodes for 6 physical nodes "
        "(too few samples per canonical node)"
    )


# -- ids' dtype ------------------------------------------------------------------------------


def test_ids_are_int32_exactly_while_they_fit():
    assert refshuffle._ids_dtype(0) is np.int32
    assert refshuffle._ids_dtype(2**31 - 1) is np.int32
    assert refshuffle._ids_dtype(2**31) is np.int64


@pytest.mark.parametrize("algo", ["py1br", "py1s", "py2s", "naive", "py1e"])
def test_get_shuffle_is_int64_unless_compact(algo):
    assert refshuffle.get_shuffle(algo, [5, 6], 1, 0, 0, 8).dtype == np.int64
    assert refshuffle.get_shuffle(algo, [5, 6], 1, 0, 0, 8, compact=True).dtype == np.int32


@pytest.mark.parametrize("algo", ["py1br", "py1s", "py2s", "naive", "py1e"])
def test_each_algorithm_sizes_its_ids_by_the_epochs_total(algo, monkeypatch):
    # the int32/int64 boundary moved down to 10 samples, where a test can cross it: an epoch
    # of 11 samples needs the wide ids, one of 9 does not (at 2**31 the arrays would be GBs)
    monkeypatch.setattr(refshuffle, "_ids_dtype", lambda n: np.int32 if n < 10 else np.int64)
    wide = refshuffle.get_shuffle(algo, [5, 6], 1, 0, 0, 8, compact=True)
    narrow = refshuffle.get_shuffle(algo, [4, 5], 1, 0, 0, 8, compact=True)
    assert (wide.dtype, narrow.dtype) == (np.int64, np.int32)
    assert sorted(wide.tolist()) == list(range(11)) and sorted(narrow.tolist()) == list(range(9))


# -- empty inputs ----------------------------------------------------------------------------


@pytest.mark.parametrize("algo", ["py1br", "py1s", "py2s", "naive"])
@pytest.mark.parametrize("sizes", [[], [0, 0]])
def test_no_samples_give_an_empty_order(algo, sizes):
    got = refshuffle.get_shuffle(algo, sizes, 2, 0, 0, 8)
    assert got.dtype == np.int64 and got.shape == (0,)
    compact = refshuffle.get_shuffle(algo, sizes, 2, 0, 0, 8, compact=True)
    assert compact.dtype.kind == "i" and compact.shape == (0,)  # ids, never floats


@pytest.mark.parametrize(("sizes", "ncn"), [([2], 3), ([], 1), ([0, 0], 2)])
def test_py1e_refuses_a_canonical_node_without_samples(sizes, ncn):
    with pytest.raises(ConfigError) as e:
        refshuffle.get_shuffle("py1e", sizes, ncn, 0, 0, 8)
    assert str(e.value) == (
        "The number of samples assigned to a canonical node is 0: the stream has fewer "
        f"samples than num_canonical_nodes={ncn}"
    )


# -- py1e's warning --------------------------------------------------------------------------


def test_py1e_warns_once_when_a_shard_is_wider_than_its_block_and_points_at_the_caller():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        refshuffle.get_shuffle("py1e", [4, 4, 4], 1, 0, 0, 4)
    assert [str(w.message) for w in caught] == [
        "shuffle_block_size is smaller than some shards: those shards are not mixed with "
        "others (py1e); raise shuffle_block_size for a stronger shuffle"
    ]
    if "mutmut" not in sys.modules:  # mutmut's trampoline adds frames: the location moves
        assert caught[0].filename == __file__


def test_py1e_does_not_warn_when_a_block_is_exactly_a_shard():
    # block 2 draws a width of exactly 1 for each one-sample shard: a reach of 0, not below
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = refshuffle.get_shuffle("py1e", [1, 1, 1], 1, 0, 0, 2)
    assert sorted(got.tolist()) == [0, 1, 2]


# -- defaults --------------------------------------------------------------------------------


def test_get_shuffle_default_block_is_two_to_the_eighteen():
    sizes = [200_000, 200_000]
    default = refshuffle.get_shuffle("py1br", sizes, 1, 3, 0)
    np.testing.assert_array_equal(default, refshuffle.get_shuffle("py1br", sizes, 1, 3, 0, 1 << 18))
    assert (default != refshuffle.get_shuffle("py1br", sizes, 1, 3, 0, 1 << 19)).any()
