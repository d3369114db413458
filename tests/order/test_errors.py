"""Bad input: ConfigError with the argument named, and the reference algorithms refused."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from astream.core.order import StreamSpec, plan_epoch
from astream.core.world import World
from astream.errors import ConfigError

from .helpers import expected_global_batches, global_batches, plan


def spec(sizes, **kw):
    return StreamSpec(np.array(sizes, np.int64), **kw)


def test_py1b_is_refused_as_absent_from_the_reference():
    with pytest.raises(ConfigError, match=r"^shuffle_algo='py1b' does not exist in mosaicml"):
        plan([3, 4], shuffle_algo="py1b")


@pytest.mark.parametrize("algo", ["py1e", "py1s", "py2s", "py1br", "naive"])
def test_reference_algorithms_take_every_batching_method(algo):
    """Exactness is golden-tested (tests/order/test_reference_batching.py); here: a stratified
    plan under each algorithm deals every global batch with the streams' exact shares."""
    p = plan_epoch(
        [spec([30, 30]), spec([20])], seed=0, epoch=0, num_canonical_nodes=1, batch_size=4,
        shuffle=True, shuffle_algo=algo, batching_method="stratified", shuffle_block_size=10,
    )  # fmt: skip
    batches = list(p.worker_batches(World(1, 1, 1), 0, 0))
    assert len(batches) == 20 and all(len(b) == 4 for b in batches)
    assert all(int((b >= 60).sum()) == 1 for b in batches)  # 1 of 4 from the 20-sample stream


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"seed": -1}, "seed must be >= 0, got -1"),
        ({"epoch": -2}, "epoch must be >= 0, got -2"),
        ({"num_canonical_nodes": 0}, "num_canonical_nodes must be >= 1, got 0"),
        ({"batch_size": 0}, "batch_size must be >= 1, got 0"),
        ({"shuffle_block_size": 0}, "shuffle_block_size must be >= 1, got 0"),
        ({"sampling_granularity": 0}, "sampling_granularity must be >= 1, got 0"),
        ({"epoch_size": 0}, "epoch_size must be >= 1, got 0"),
        ({"seed": 1.5}, "seed must be an int, got float 1.5"),
        ({"shuffle_algo": "fast"}, "shuffle_algo: unknown algorithm 'fast'"),
        (
            {"sampling_method": "x"},
            "Invalid sampling method: 'x'; sampling_method must be 'balanced' or 'fixed'",
        ),
        (
            {"partition_algo": "x"},
            "partition_algo='x' is not supported: use 'relaxed' or 'orig'",
        ),
        ({"batching_method": "zig"}, "batching_method: unknown method 'zig'"),
    ],
)
def test_bad_arguments_named(kwargs, message):
    with pytest.raises(ConfigError) as e:
        plan([3, 4], **kwargs)
    assert str(e.value) == message


@pytest.mark.parametrize(
    ("streams", "message"),
    [
        ([], "streams: need at least one StreamSpec"),
        ([spec([0, 0])], "streams: the dataset is empty (every shard_sizes sums to 0)"),
        ([spec([])], "streams: the dataset is empty (every shard_sizes sums to 0)"),
        ([spec([3, -1])], "streams[0].shard_sizes: negative shard size -1"),
        ([StreamSpec(np.array([1.5]))], "streams[0].shard_sizes: need a 1-D integer array"),
        (
            [spec([3], proportion=1, repeat=2)],
            "streams[0]: give at most one of proportion, repeat, choose",
        ),
        ([spec([3], proportion=-1)], "streams[0].proportion: must be finite and >= 0, got -1"),
        ([spec([3], repeat=float("nan"))], "streams[0].repeat: must be finite and >= 0, got nan"),
        ([spec([3], choose=-4)], "streams[0].choose must be >= 0, got -4"),
        (
            [spec([3], proportion=1), spec([2])],
            "streams[1]: relative (proportion) and absolute "
            "(repeat, choose, none) stream weights cannot be mixed",
        ),
        (
            [spec([3], proportion=0), spec([2], proportion=0)],
            "proportion: must be finite with a positive sum, got [0, 0]",
        ),
        (
            [spec([3], proportion=1), spec([0], proportion=1)],
            "streams[1]: proportion=1.0 but the stream is empty",
        ),
        (
            [spec([3]), spec([0, 0], choose=5)],
            "streams[1]: choose=5 is larger than possible: the stream is empty",
        ),
        ([spec([3], repeat=0.1)], "streams: the weights choose no sample at all for this epoch"),
    ],
)
def test_bad_streams_named(streams, message):
    with pytest.raises(ConfigError) as e:
        plan_epoch(streams, seed=0, epoch=0, num_canonical_nodes=1, batch_size=1, shuffle=True)
    assert str(e.value) == message


def test_epoch_size_only_with_relative_weights():
    with pytest.raises(ConfigError, match=r"^epoch_size: only allowed with relative"):
        plan_epoch(
            [spec([3], repeat=2)],
            seed=0,
            epoch=0,
            num_canonical_nodes=1,
            batch_size=1,
            shuffle=True,
            epoch_size=5,
        )


def test_stratified_stream_share_rounding_to_zero():
    streams = [spec([100], proportion=0.95), spec([100], proportion=0.05)]
    with pytest.raises(ConfigError) as e:
        plan_epoch(
            streams,
            seed=0,
            epoch=0,
            num_canonical_nodes=1,
            batch_size=4,
            shuffle=True,
            batching_method="stratified",
            global_batch_size=8,
        )
    assert str(e.value) == (
        "global_batch_size=8 is too small for streams[1]: its share of a stratum rounds to 0 "
        "samples; raise global_batch_size or that stream's weight"
    )


def test_zero_sample_shards_are_skipped_not_errors():
    # the reference writer can emit a 0-sample shard; such datasets must stream
    p = plan([0, 3, 0, 2, 0], num_canonical_nodes=2)
    assert sorted(p.global_ids(0, p.num_samples).tolist()) == [0, 1, 2, 3, 4]
    assert sorted(p.shard_of(np.arange(5)).tolist()) == [1, 1, 1, 3, 3]


def test_world_incompatible_with_canonical_nodes_under_orig():
    p = plan([10, 10], num_canonical_nodes=4, partition_algo="orig")
    with pytest.raises(ConfigError) as e:
        next(p.worker_batches(World(3, 1, 1), 0, 0))
    assert str(e.value) == (
        "num_canonical_nodes=4 is incompatible with num_nodes=3: one must divide the other "
        "(partition_algo='orig'; 'relaxed' accepts any num_nodes)"
    )
    p.rank_num_samples(World(8, 1, 1), 7)  # 4 divides 8: fine
    p.rank_num_samples(World(2, 1, 1), 1)  # 2 divides 4: fine


def test_relaxed_deals_the_same_global_order_to_any_num_nodes():
    p = plan([10, 10], num_canonical_nodes=4, batch_size=2)  # partition_algo="relaxed"
    got = global_batches(p, World(3, 1, 1))
    assert got == expected_global_batches(p, World(3, 1, 1))
    g = p.global_ids(0, 20)
    assert got[:3] == [Counter(g[j : j + 6].tolist()) for j in range(0, 18, 6)]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda p: p.worker_batches(World(1, 2, 2), 2, 0),
            "global_rank must be < num_ranks=2, got 2",
        ),
        (
            lambda p: p.worker_batches(World(1, 2, 2), 1, 2),
            "worker must be < workers_per_rank=2, got 2",
        ),
        (lambda p: p.worker_batches(World(), 0, 0, start=-1), "start must be >= 0, got -1"),
        (
            lambda p: p.worker_batches(World(), 0, 0, start=21),
            "start=21 is past the epoch's 20 samples",
        ),
    ],
)
def test_bad_dealing_arguments(call, message):
    with pytest.raises(ConfigError) as e:
        call(plan([10, 10]))
    assert str(e.value) == message


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_nodes": 0}, "num_nodes must be >= 1, got 0"),
        ({"ranks_per_node": -1}, "ranks_per_node must be >= 1, got -1"),
        ({"workers_per_rank": True}, "workers_per_rank must be an int, got bool True"),
    ],
)
def test_world_validation(kwargs, message):
    with pytest.raises(ConfigError) as e:
        World(**kwargs)
    assert str(e.value) == message


def test_world_ranks():
    w = World(3, 4, 2)
    assert (w.num_ranks, w.num_workers) == (12, 24)
    assert w.global_rank(2, 1) == 9 and w.node_of(9) == 2
    with pytest.raises(ConfigError, match=r"^local_rank must be < ranks_per_node=4, got 4$"):
        w.global_rank(0, 4)
    with pytest.raises(ConfigError, match=r"^node must be < num_nodes=3, got 3$"):
        w.global_rank(3, 0)
