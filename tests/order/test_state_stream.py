"""LoaderState round trips (and reads the reference's state_dict); Stream validates only."""

from __future__ import annotations

import json

import numpy as np
import pytest

from astream.core.state import STATE_VERSION, LoaderState
from astream.errors import ConfigError
from astream.stream import Stream


def test_state_round_trip_is_plain_json():
    s = LoaderState(
        epoch=3,
        sample_in_epoch=4096,
        shuffle_seed=9186,
        num_canonical_nodes=8,
        initial_physical_nodes=2,
        initial_ranks_per_node=8,
        initial_workers_per_rank=4,
    )
    d = s.to_dict()
    assert d == {
        "epoch": 3,
        "sample_in_epoch": 4096,
        "shuffle_seed": 9186,
        "num_canonical_nodes": 8,
        "initial_physical_nodes": 2,
        "initial_ranks_per_node": 8,
        "initial_workers_per_rank": 4,
        "astream_version": STATE_VERSION,
    }
    assert LoaderState.from_dict(json.loads(json.dumps(d))) == s


def test_state_reads_reference_state_dict():
    ref = {
        "epoch": 1,
        "sample_in_epoch": 640,
        "num_canonical_nodes": 2,
        "shuffle_seed": 7,
        "initial_physical_nodes": 1,
    }
    s = LoaderState.from_dict(ref)
    assert (s.epoch, s.sample_in_epoch, s.num_canonical_nodes, s.shuffle_seed) == (1, 640, 2, 7)
    assert s.initial_physical_nodes == 1 and s.initial_ranks_per_node is None
    assert {k: v for k, v in s.to_dict().items() if k in ref} == ref


@pytest.mark.parametrize(
    ("d", "message"),
    [
        (
            {"epoch": 0, "sample_in_epoch": 0, "num_canonical_nodes": 1},
            "state: missing key 'shuffle_seed'",
        ),
        (
            {"epoch": -1, "sample_in_epoch": 0, "num_canonical_nodes": 1, "shuffle_seed": 0},
            "state['epoch']: must be >= 0, got -1",
        ),
        (
            {"epoch": 0, "sample_in_epoch": "5", "num_canonical_nodes": 1, "shuffle_seed": 0},
            "state['sample_in_epoch']: must be an int, got str '5'",
        ),
        (
            {"epoch": 0, "sample_in_epoch": 0, "num_canonical_nodes": 0, "shuffle_seed": 0},
            "state['num_canonical_nodes']: must be >= 1, got 0",
        ),
        (
            {"epoch": 0, "sample_in_epoch": 0, "num_canonical_nodes": 1, "shuffle_seed": -3},
            "state['shuffle_seed']: must be >= 0, got -3",
        ),
        (
            {
                "epoch": 0,
                "sample_in_epoch": 0,
                "num_canonical_nodes": 1,
                "shuffle_seed": 0,
                "astream_version": 99,
            },
            "state['astream_version']: 99 is newer than this astream (1)",
        ),
        ([1], "state: must be a dict, got list"),
    ],
)
def test_state_errors(d, message):
    with pytest.raises(ConfigError) as e:
        LoaderState.from_dict(d)
    assert str(e.value) == message


def test_state_constructor_validates():
    with pytest.raises(ConfigError, match=r"^state\['sample_in_epoch'\]: must be >= 0, got -5$"):
        LoaderState(epoch=0, sample_in_epoch=-5, shuffle_seed=0, num_canonical_nodes=1)


def test_stream_fields_and_spec():
    s = Stream(remote="s3://b/x", split="train", repeat=2.5, download_retry=0, keep_zip=True)
    assert (s.remote, s.local, s.split, s.repeat, s.proportion, s.choose) == (
        "s3://b/x",
        None,
        "train",
        2.5,
        None,
        None,
    )
    spec = s.spec(np.array([3, 4]))
    assert spec.repeat == 2.5 and spec.shard_sizes.dtype == np.int64
    assert spec.shard_sizes.tolist() == [3, 4]
    s.check_location()
    with pytest.raises(ConfigError, match=r"^Stream: remote and/or local must be provided$"):
        Stream(proportion=0.5).check_location()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"proportion": 0.5, "choose": 3},
            "Stream: give at most one of proportion, repeat, choose",
        ),
        ({"proportion": -0.5}, "proportion must be finite and >= 0, got -0.5"),
        ({"repeat": float("inf")}, "repeat must be finite and >= 0, got inf"),
        ({"choose": 2.0}, "choose must be an int, got float 2.0"),
        ({"download_retry": -1}, "download_retry must be >= 0, got -1"),
        ({"download_timeout": 0}, "download_timeout must be finite and > 0, got 0"),
        ({"remote": 5}, "remote must be a str or None, got int"),
        ({"keep_zip": "yes"}, "keep_zip must be a bool or None, got str"),
    ],
)
def test_stream_errors(kwargs, message):
    with pytest.raises(ConfigError) as e:
        Stream(**kwargs)
    assert str(e.value) == message
