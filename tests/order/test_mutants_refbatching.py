"""refbatching's warnings, errors and edge cases that the goldens do not pin down: which
streams are said to leave a short batch (as the reference, a stream whose samples fill whole
batches is not), the resume warning (``warnings.warn`` for ``stratified``, the logger for the
others, as the reference), the refusals' messages, and the dtype of the work arrays.

Work arrays are built with :func:`refbatching.batching_work` on small streams whose ids are
given directly (``small``: the global id of each index-order position), unshuffled, so every
expected batch is written out by hand from the reference's rules.
"""

from __future__ import annotations

import linecache
import logging
import os
import sys
import warnings

import numpy as np
import pytest

from astream.core import refbatching
from astream.core.world import World
from astream.errors import ConfigError

from .test_mutants_refplans import _BATCHING_META
from .test_reference_uneven import case_plan

LOGGER = "astream.core.refbatching"


def work(method: str, smalls: list[list[int]], *, bs: int, rpn: int = 1, ncn: int = 1, pn: int = 1):
    """The reference's work array of unshuffled streams with ids ``smalls``, one worker."""
    streams = [(np.array([len(s)], np.int64), np.array(s, np.int64)) for s in smalls]
    props = np.array([len(s) for s in smalls], np.float64)
    return refbatching.batching_work(
        method, streams, props / props.sum(), shuffle=False, algo="py1e", seed=0, epoch=0,
        block=64, ncn=ncn, pn=pn, rpn=rpn, workers=1, bs=bs, start=0,
        epoch_seed_change=False,
    )  # fmt: skip


def dropped(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def rows(out: np.ndarray) -> list[list[int]]:
    """The single rank's batches of a one-node, one-rank, one-worker work array."""
    return [b.tolist() for b in out[0, 0, 0]]


# -- stratified ------------------------------------------------------------------------------


def test_stratified_names_only_the_streams_that_drop_samples(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # a global batch of 4: shares 2 + 2 (7/13 and 6/13 of it, the larger remainder rounded
    # up); stream 0's 7 samples leave one, stream 1's 6 fill 3 shares exactly
    s0, s1 = list(range(7)), list(range(7, 13))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        out = work("stratified", [s0, s1], bs=4)
    assert dropped(caplog) == [
        "batching_method='stratified': stream 0 (streams[0]) leaves a short batch, which is dropped"
    ]
    assert out.dtype == np.int64
    assert rows(out) == [[0, 1, 7, 8], [2, 3, 9, 10], [4, 5, 11, 12]]


def test_stratified_streams_that_fill_their_shares_drop_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        out = work("stratified", [list(range(6)), list(range(6, 12))], bs=4)
    assert dropped(caplog) == []
    assert rows(out) == [[0, 1, 6, 7], [2, 3, 8, 9], [4, 5, 10, 11]]


# -- per_stream ------------------------------------------------------------------------------


def test_per_stream_names_only_the_streams_that_drop_a_short_batch(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # 2 ranks of batch 2: stream 0's 10 samples are 5 per rank, rounded to 6 with -1: its
    # third global batch is short and dropped; stream 1's 8 fill two global batches
    s0, s1 = list(range(10)), list(range(10, 18))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        out = work("per_stream", [s0, s1], bs=2, rpn=2)
    assert dropped(caplog) == [
        "batching_method='per_stream': stream 0 (streams[0]) leaves a short batch, which is dropped"
    ]
    assert out.dtype == np.int64 and out.shape == (1, 2, 1, 4, 2)
    got = sorted(sorted(out[0, :, 0, b].ravel().tolist()) for b in range(4))
    # global batch: rank 0 takes the even positions, rank 1 the odd ones, two each
    assert got == [[0, 1, 2, 3], [4, 5, 6, 7], [10, 11, 12, 13], [14, 15, 16, 17]]


def test_per_stream_refuses_a_stream_without_a_whole_global_batch() -> None:
    with pytest.raises(ValueError, match=r"^streams\[1\] does not fill one global batch of 4$"):
        work("per_stream", [list(range(8)), [8, 9]], bs=2, rpn=2)


# -- device_per_stream -----------------------------------------------------------------------


def test_device_per_stream_names_only_the_streams_that_drop_samples(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # batch 2: stream 0's 5 samples leave one (id 4), stream 1's 4 fill two batches exactly
    # (its padding is a whole -1 row, which drops nothing); stream 2's 2 fill one batch
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        out = work("device_per_stream", [[0, 1, 2, 3, 4], [5, 6, 7, 8], [9, 10]], bs=2)
    assert dropped(caplog) == [
        "batching_method='device_per_stream': stream 0 (streams[0]) leaves a short batch, "
        "which is dropped"
    ]
    assert out.dtype == np.int64
    got = [b for b in rows(out) if b != [-1, -1]]
    assert sorted(got) == [[0, 1], [2, 3], [5, 6], [7, 8], [9, 10]]


def test_device_per_stream_warns_when_only_sample_0_is_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # stream 0 holds ids 2, 1, 0 in index order: the short batch it drops is sample 0 alone
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        out = work("device_per_stream", [[2, 1, 0], [3, 4]], bs=2)
    assert dropped(caplog) == [
        "batching_method='device_per_stream': stream 0 (streams[0]) leaves a short batch, "
        "which is dropped"
    ]
    assert sorted(b for b in rows(out) if b != [-1, -1]) == [[2, 1], [3, 4]]


def test_device_per_stream_pads_nodes_with_minus_one_batches() -> None:
    # 2 nodes of 1 rank: each node has 3 device batches, padded to 4 (a multiple of the 2
    # ranks, at least one more) with batches of -1, never another marker
    out = work("device_per_stream", [list(range(8)), list(range(8, 12))], bs=2, ncn=2, pn=2)
    assert out.dtype == np.int64 and out.shape == (2, 1, 1, 4, 2)
    assert set(out[out < 0].tolist()) == {-1} and int(np.count_nonzero(out < 0)) == 4
    real = sorted(b for node in out for b in node[0, 0].tolist() if b != [-1, -1])
    assert real == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10, 11]]


def test_device_per_stream_refuses_a_stream_without_a_whole_device_batch() -> None:
    with pytest.raises(ValueError, match=r"^streams\[1\] does not fill one device batch of 2$"):
        work("device_per_stream", [[0, 1, 2, 3], [4]], bs=2)


# -- the resume warning ----------------------------------------------------------------------


def _case(k: int):
    c = _BATCHING_META["cases"][k]
    pn, rpn, _w = c["shape"]
    p = case_plan(c, _BATCHING_META["streams"], global_batch_size=c["batch"] * pn * rpn)
    return p, World(*c["shape"]), c["start"]


def test_stratified_resume_warns_at_the_plan_that_resumes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    p, world, start = _case(14)  # stratified, 2x2x2, batch 8: global batch 32, resumed at 48
    with warnings.catch_warnings(record=True) as rec, caplog.at_level(logging.WARNING):
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", message="shuffle_block_size is smaller")
        list(p.worker_batches(world, 0, 0, start))
    text = (
        "batching_method='stratified' resumes only at a multiple of the global batch size 32: "
        "sample 48 resumes after the last whole global batch"
    )
    assert [str(w.message) for w in rec] == [text]
    assert rec[0].category is UserWarning
    # attributed to the plan's line that builds the work (4 frames up), not refbatching's;
    # under mutmut its trampolines add frames, so the location is only checked outside it
    if "mutmut" not in sys.modules:
        assert os.path.basename(rec[0].filename) == "refplans.py"
        assert "self._work(world, start)" in linecache.getline(rec[0].filename, rec[0].lineno)
    assert [m for m in dropped(caplog) if "resumes" in m] == []  # not logged as well


@pytest.mark.parametrize("k", [68, 134])  # per_stream, device_per_stream; resumed at 48
def test_other_methods_log_the_resume(caplog: pytest.LogCaptureFixture, k: int) -> None:
    p, world, start = _case(k)
    method = _BATCHING_META["cases"][k]["batching_method"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warnings.warn for these methods
        warnings.filterwarnings("ignore", message="shuffle_block_size is smaller")
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            list(p.worker_batches(world, 0, 0, start))
    resume = [m for m in dropped(caplog) if "resumes" in m]
    assert resume == [
        f"batching_method={method!r} resumes only at a multiple of the global batch size 32: "
        "sample 48 resumes after the last whole global batch"
    ]


def test_reading_ids_does_not_warn_again() -> None:
    # ids are read from the epoch's global batch sequence from its start: no resume there
    p, world, start = _case(14)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pos = p.rank_positions(world, 1, 0, start)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", message="shuffle_block_size is smaller")
        assert p.ids_at(pos).dtype == np.int64


def test_refusals_through_the_plan_name_the_method() -> None:
    c = dict(_BATCHING_META["cases"][66], batch=64)  # per_stream, one rank: global batch 64
    want = r"^batching_method='per_stream': streams\[1\] does not fill one global batch of 64$"
    with pytest.raises(ConfigError, match=want):
        case_plan(c, _BATCHING_META["streams"], global_batch_size=None)


@pytest.mark.parametrize("method", ["stratified", "per_stream", "device_per_stream"])
def test_a_resume_at_a_whole_global_batch_is_not_said_to_round(
    method: str, caplog: pytest.LogCaptureFixture
) -> None:
    streams = [(np.array([16], np.int64), np.arange(16, dtype=np.int64))]
    with warnings.catch_warnings(), caplog.at_level(logging.WARNING, logger=LOGGER):
        warnings.simplefilter("error")
        out = refbatching.batching_work(
            method, streams, np.array([1.0]), shuffle=False, algo="py1e", seed=0, epoch=0,
            block=64, ncn=1, pn=1, rpn=1, workers=1, bs=4, start=8, epoch_seed_change=False,
        )  # fmt: skip
    assert [m for m in dropped(caplog) if "resumes" in m] == []
    real = [r for r in rows(out) if r != [-1] * 4]  # device_per_stream pads its node's batches
    assert real == [[8, 9, 10, 11], [12, 13, 14, 15]]


def test_a_block_that_rounds_to_nothing_names_its_stream() -> None:
    # device_per_stream shuffles each stream in blocks of its share: stream 1's share of 64 is 0
    streams = [
        (np.array([99], np.int64), np.arange(99, dtype=np.int64)),
        (np.array([1], np.int64), np.array([99], np.int64)),
    ]
    with pytest.raises(ValueError, match=r"^streams\[1\]: shuffle_block_size=64 x its proportion"):
        refbatching.batching_work(
            "device_per_stream", streams, np.array([0.99, 0.01]), shuffle=True, algo="py1e",
            seed=0, epoch=0, block=64, ncn=1, pn=1, rpn=1, workers=1, bs=1, start=0,
            epoch_seed_change=False,
        )  # fmt: skip
