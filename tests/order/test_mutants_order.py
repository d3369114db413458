"""What a wrong constant or a dropped argument in order.py would break: astream's default
shuffle block, the stratified make-up and its refusals, the per-stream chunk tables, the
device_per_stream refusal that names the first canonical node without a full device batch,
and the pinned own orders of the per-stream batching methods.

Every expected value is written out; the pinned orders are astream's own (a resume position
only names the same samples if the order never changes between versions).
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

from astream.core.order import StreamSpec, default_block_size, plan_epoch
from astream.core.world import World
from astream.errors import ConfigError


def spec(sizes: list[int], **kw: object) -> StreamSpec:
    return StreamSpec(np.array(sizes, np.int64), **kw)  # type: ignore[arg-type]


def plan_streams(streams: list[StreamSpec], **kw: object):  # type: ignore[no-untyped-def]
    args: dict[str, object] = dict(
        seed=5, epoch=1, num_canonical_nodes=1, batch_size=1, shuffle=True
    )
    args.update(kw)
    return plan_epoch(streams, **args)  # type: ignore[arg-type]


def ids(p) -> list[int]:  # type: ignore[no-untyped-def]
    return p.global_ids(0, p.num_samples).tolist()


# -- astream's default shuffle block -----------------------------------------------------------


@pytest.mark.parametrize(
    ("sizes", "block"),
    [
        ([[0, 0, 0, 2000, 3000]], 10_000),  # empty shards do not count toward the median
        ([[1, 1, 5000, 6000]], 4 * 2500),  # one-sample shards do: median 2500.5
        ([[2500], [0, 2500, 0]], 10_000),  # over every stream
        ([[10, 20, 30]], 1 << 12),  # clamped up to 4096
        ([[0, 0]], 1 << 12),  # no non-empty shard: the floor
        ([[1]], 1 << 12),
        ([[300_000, 300_000]], 1 << 20),  # clamped down to 2**20
        ([[262_144]], 1 << 20),  # exactly 4 * 2**18 = 2**20
        ([[262_145]], 1 << 20),
        ([[262_143]], 4 * 262_143),
        ([[1023, 1025]], 4 * 1024),
    ],
)
def test_default_block_size_is_four_median_shards_clamped(sizes, block):
    assert default_block_size([np.array(s, np.int64) for s in sizes]) == block


def test_plan_uses_astreams_default_block_when_none_is_given():
    p = plan_streams([spec([0, 2000, 3000, 0])], num_canonical_nodes=1)
    assert p.block_size == 10_000


# -- stratified ------------------------------------------------------------------------------


def test_stratified_global_batch_size_is_checked_by_name():
    with pytest.raises(ConfigError) as e:
        plan_streams([spec([4]), spec([4])], batching_method="stratified", global_batch_size=0)
    assert str(e.value) == "global_batch_size must be >= 1, got 0"


def test_stratified_with_epoch_size_and_no_weights_shares_by_stream_size():
    # epoch_size=7 over streams of 10 and 20 samples chooses [2, 5]; the reference's make-up
    # of a stratum of 5 is by size (1/3, 2/3) -> [2, 3], not by the chosen counts ([1, 4])
    p = plan_streams(
        [spec([10]), spec([20])], batching_method="stratified", global_batch_size=5, epoch_size=7
    )
    got = ids(p)
    assert len(got) == 5
    assert sum(i < 10 for i in got) == 2


def test_stratified_skips_a_stream_of_weight_zero():
    p = plan_streams(
        [spec([6], proportion=1), spec([6], proportion=0)],
        batching_method="stratified",
        global_batch_size=2,
    )
    assert sorted(ids(p)) == sorted(list(range(6)) * 2)  # all 12 from stream 0


def test_stratified_with_exactly_one_full_stratum():
    p = plan_streams([spec([2]), spec([3])], batching_method="stratified", global_batch_size=5)
    assert sorted(ids(p)) == [0, 1, 2, 3, 4]


def test_stratified_refuses_an_epoch_without_one_full_stratum():
    # stratum of 30 over 3 + 20 samples: [4, 26] per stratum, neither stream fills one
    with pytest.raises(ConfigError) as e:
        plan_streams([spec([3]), spec([20])], batching_method="stratified", global_batch_size=30)
    assert str(e.value) == "global_batch_size=30: not even one full stratum fits in the epoch"


def test_stratified_refuses_a_stream_with_one_sample_and_no_share():
    # 100 and 1 samples, stratum of 4: shares 3.96 and 0.04 round to [4, 0]
    with pytest.raises(ConfigError) as e:
        plan_streams([spec([100]), spec([1])], batching_method="stratified", global_batch_size=4)
    assert str(e.value) == (
        "global_batch_size=4 is too small for streams[1]: its share of a stratum rounds to 0 "
        "samples; raise global_batch_size or that stream's weight"
    )


def test_stratified_plan_keeps_its_block_nodes_and_partition_algo():
    p = plan_streams(
        [spec([8]), spec([8])], batching_method="stratified", global_batch_size=4,
        num_canonical_nodes=3, shuffle_block_size=5, partition_algo="orig",
    )  # fmt: skip
    assert (p.block_size, p.num_canonical_nodes, p.partition_algo) == (5, 3, "orig")
    with pytest.raises(ConfigError, match=r"^num_canonical_nodes=3 is incompatible with num_nod"):
        p.rank_num_samples(World(2, 1, 1), 0)


def test_stratified_order_is_pinned():
    p = plan_streams(
        [spec([3, 5]), spec([4, 4])], batching_method="stratified", global_batch_size=4,
        batch_size=2, num_canonical_nodes=2, shuffle_block_size=4,
    )  # fmt: skip
    assert ids(p) == [5, 7, 8, 14, 4, 0, 10, 15, 6, 1, 9, 12, 3, 2, 11, 13]


# -- per_stream ------------------------------------------------------------------------------


def test_per_stream_refuses_a_one_sample_stream():
    with pytest.raises(ConfigError) as e:
        plan_streams([spec([8]), spec([1])], batching_method="per_stream", global_batch_size=2)
    assert str(e.value) == (
        "streams[1]: its 1 samples this epoch do not fill one global batch "
        "(global_batch_size=2); per-stream batching needs at least one full batch from every "
        "stream"
    )


def test_per_stream_skips_a_stream_of_weight_zero():
    p = plan_streams(
        [spec([4], proportion=1), spec([4], proportion=0)],
        batching_method="per_stream",
        global_batch_size=2,
    )
    assert sorted(ids(p)) == [0, 0, 1, 1, 2, 2, 3, 3]  # all 8 from stream 0


def test_per_stream_order_and_chunk_labels_are_pinned():
    p = plan_streams(
        [spec([6, 6]), spec([5, 3])], batching_method="per_stream", global_batch_size=4,
        batch_size=2, num_canonical_nodes=2, shuffle_block_size=4,
    )  # fmt: skip
    assert ids(p) == [8, 0, 7, 1, 9, 2, 6, 3, 12, 18, 14, 19, 11, 4, 10, 5, 13, 16, 15, 17]
    # the stream label of each chunk is int32: half the memory of the int64 default
    assert p._chunks[0].dtype == np.int32


# -- device_per_stream -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("streams", "ncn", "bs", "node"),
    [
        ([spec([7])], 2, 4, 1),  # node 0 holds 4, node 1 only 3
        ([spec([5])], 4, 2, 1),  # nodes hold 2, 1, 1, 1
        ([spec([9])], 8, 2, 1),  # nodes hold 2, 1, ...
        ([spec([20])], 8, 3, 4),  # nodes hold 3, 3, 3, 3, 2, ...
        ([spec([3]), spec([5], repeat=0)], 1, 4, 0),  # an empty stream beside a short one
    ],
)
def test_device_per_stream_names_the_first_node_without_a_device_batch(streams, ncn, bs, node):
    with pytest.raises(ConfigError) as e:
        plan_streams(streams, batching_method="device_per_stream", batch_size=bs,
                     num_canonical_nodes=ncn)  # fmt: skip
    assert str(e.value) == (
        f"batching_method='device_per_stream': canonical node {node} of num_canonical_nodes="
        f"{ncn} holds no full device batch (batch_size={bs}) of any stream; lower "
        "num_canonical_nodes or batch_size"
    )


@pytest.mark.parametrize(("n", "ncn", "bs"), [(4, 1, 4), (8, 2, 4), (6, 3, 2)])
def test_device_per_stream_accepts_nodes_filled_exactly(n, ncn, bs):
    p = plan_streams([spec([n])], batching_method="device_per_stream", batch_size=bs,
                     num_canonical_nodes=ncn)  # fmt: skip
    assert sorted(ids(p)) == list(range(n))


def test_device_per_stream_refuses_a_stream_without_a_device_batch():
    # node 0 has a full batch of stream 0, so the node check passes; stream 1 has none at all
    with pytest.raises(ConfigError) as e:
        plan_streams([spec([8]), spec([3])], batching_method="device_per_stream", batch_size=4)
    assert str(e.value) == (
        "streams[1]: its 3 samples this epoch do not fill one device batch (batch_size=4); "
        "per-stream batching needs at least one full batch from every stream"
    )


def test_device_per_stream_skips_a_stream_of_weight_zero():
    p = plan_streams(
        [spec([4], proportion=1), spec([4], proportion=0)],
        batching_method="device_per_stream",
        batch_size=2,
    )
    assert sorted(ids(p)) == [0, 0, 1, 1, 2, 2, 3, 3]  # all 8 from stream 0


def test_device_per_stream_plan_keeps_its_block_and_partition_algo():
    p = plan_streams(
        [spec([8]), spec([8])], batching_method="device_per_stream", batch_size=2,
        num_canonical_nodes=2, shuffle_block_size=5, partition_algo="orig",
    )  # fmt: skip
    assert (p.block_size, p.partition_algo) == (5, "orig")
    with pytest.raises(ConfigError, match=r"^num_canonical_nodes=2 is incompatible with num_nod"):
        p.rank_num_samples(World(3, 1, 1), 0)


def test_device_per_stream_order_is_pinned_and_seeded():
    kw = dict(batching_method="device_per_stream", batch_size=2, num_canonical_nodes=2,
              shuffle_block_size=4)  # fmt: skip
    p = plan_streams([spec([6, 6]), spec([5, 3])], **kw)
    assert ids(p) == [8, 7, 2, 3, 12, 14, 18, 19, 11, 10, 0, 1, 9, 6, 16, 17, 13, 15, 4, 5]
    assert p._chunks[0].tolist() == [0, 0, 1, 1, 0, 0, 0, 1, 1, 0]
    assert p._chunks[0].dtype == np.int32
    q = plan_streams([spec([6, 6]), spec([5, 3])], **kw, seed=6)
    assert q._chunks[0].tolist() == [0, 0, 1, 1, 0, 0, 1, 1, 0, 0]


# -- sampling_method: what "fixed" keeps -----------------------------------------------------


def test_fixed_sampling_keeps_the_partial_draw_of_epoch_zero():
    streams = [spec([7, 5]), spec([50, 50, 50], repeat=0.3)]
    fixed = [sorted(ids(plan_streams(streams, epoch=e, sampling_method="fixed"))) for e in (0, 3)]
    balanced = [sorted(ids(plan_streams(streams, epoch=e))) for e in (0, 1)]
    assert fixed[0] == fixed[1] == balanced[0]
    assert balanced[0] != balanced[1]


def test_fixed_sampling_keeps_the_per_stream_chunk_order_of_epoch_zero():
    streams = [spec([8, 8]), spec([12])]
    kw = dict(batching_method="per_stream", global_batch_size=2)
    fixed = plan_streams(streams, epoch=4, sampling_method="fixed", **kw)._chunks[0].tolist()
    balanced = [plan_streams(streams, epoch=e, **kw)._chunks[0].tolist() for e in (0, 1)]
    assert fixed == balanced[0] != balanced[1]


def test_per_stream_unit_defaults_to_the_batch_size():
    p = plan_streams([spec([6]), spec([3])], batching_method="per_stream", batch_size=3)
    assert p.num_samples == 9 and len(p._chunks[0]) == 3


def test_per_stream_global_batch_size_is_checked_by_name():
    with pytest.raises(ConfigError) as e:
        plan_streams([spec([4]), spec([4])], batching_method="per_stream", global_batch_size=0)
    assert str(e.value) == "global_batch_size must be >= 1, got 0"


def test_per_stream_counts_whole_global_batches_exactly_on_huge_streams():
    # 2**60 - 1 samples hold 2**20 - 1 whole global batches of 2**40: an integer division
    # (float division rounds the quotient up to 2**20); the plan stays O(shards + batches)
    p = plan_streams(
        [spec([2**60 - 1]), spec([2**41])], batching_method="per_stream", global_batch_size=2**40
    )
    assert p.num_samples == (2**20 - 1 + 2) * 2**40
    assert np.bincount(p._chunks[0]).tolist() == [2**20 - 1, 2]


def test_per_stream_plan_keeps_its_block_nodes_and_partition_algo():
    p = plan_streams(
        [spec([8]), spec([8])], batching_method="per_stream", global_batch_size=4,
        num_canonical_nodes=3, shuffle_block_size=5, partition_algo="orig",
    )  # fmt: skip
    assert (p.block_size, p.num_canonical_nodes, p.partition_algo) == (5, 3, "orig")
    with pytest.raises(ConfigError, match=r"^num_canonical_nodes=3 is incompatible with num_nod"):
        p.rank_num_samples(World(2, 1, 1), 0)


# -- the reference's warning about more canonical nodes than samples -------------------------


def few_samples_warnings(method: str, shuffle: bool, algo: str) -> list[str]:
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plan_streams([spec([3]), spec([3])], num_canonical_nodes=4, batch_size=2,
                     batching_method=method, shuffle=shuffle, shuffle_algo=algo)  # fmt: skip
    return [str(w.message) for w in caught]


@pytest.mark.parametrize(("shuffle", "algo"), [(True, "py1s"), (False, "astream")])
def test_random_batching_warns_over_the_whole_epoch_only(shuffle, algo):
    # 6 samples over 4 canonical nodes: enough (each stream alone has 3)
    assert few_samples_warnings("random", shuffle, algo) == []


@pytest.mark.parametrize(("shuffle", "algo"), [(True, "py1s"), (False, "astream")])
def test_per_stream_batching_methods_warn_for_each_short_stream(shuffle, algo):
    message = (
        "3 samples over num_canonical_nodes=4 canonical nodes: samples repeat to fill every "
        "node, and batches may be dropped; check the dataset's size or lower "
        "num_canonical_nodes"
    )
    assert few_samples_warnings("stratified", shuffle, algo) == [message, message]


def test_as_many_samples_as_canonical_nodes_do_not_warn():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plan_streams([spec([4]), spec([4])], num_canonical_nodes=4, batch_size=2,
                     batching_method="stratified", shuffle_algo="py1s")  # fmt: skip
        plan_streams([spec([2]), spec([2])], num_canonical_nodes=4, shuffle_algo="py1s")


def test_few_samples_warning_points_at_the_users_len_call(tmp_path):
    import warnings

    from astream import MDSWriter, StreamingDataset

    with MDSWriter(out=str(tmp_path / "ds"), columns={"x": "int"}) as w:
        for i in range(5):
            w.write({"x": i})
    with pytest.warns(UserWarning, match="^5 samples over num_canonical_nodes=8"):
        ds = StreamingDataset(local=str(tmp_path / "ds"), shuffle=True, shuffle_algo="py1s",
                              num_canonical_nodes=8, batch_size=1)  # fmt: skip
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert len(ds) == 8  # the reference's layout repeats samples to fill 8 nodes
    assert [str(w.message)[:38] for w in caught] == ["5 samples over num_canonical_nodes=8 c"]
    if "mutmut" not in sys.modules:  # mutmut's trampoline adds frames: the location moves
        assert caught[0].filename == __file__


def test_astreams_shuffled_order_never_warns_about_few_samples():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plan_streams([spec([3])], num_canonical_nodes=4)


# -- the streams and options checks ----------------------------------------------------------


def test_shard_sizes_must_be_one_dimensional():
    with pytest.raises(ConfigError) as e:
        plan_streams([spec([4]), StreamSpec(np.array([[3, 4]], np.int64))])
    assert str(e.value) == "streams[1].shard_sizes: need a 1-D integer array"


def test_unsigned_and_empty_shard_size_arrays_are_accepted():
    p = plan_streams([StreamSpec(np.array([3, 250], np.uint8)), StreamSpec(np.array([]))])
    q = plan_streams([spec([3, 250])])
    assert ids(p) == ids(q) and p.shard_of(np.array([2, 3])).tolist() == [0, 1]


def test_one_sample_and_choose_zero_are_accepted():
    assert ids(plan_streams([spec([1])])) == [0]
    assert sorted(ids(plan_streams([spec([2]), spec([3], choose=0)]))) == [0, 1]


def test_a_stream_weight_of_infinity_is_refused():
    with pytest.raises(ConfigError) as e:
        plan_streams([spec([3], proportion=float("inf"))])
    assert str(e.value) == "streams[0].proportion: must be finite and >= 0, got inf"


def test_initial_physical_nodes_is_checked_and_only_for_the_reference():
    with pytest.raises(ConfigError) as e:
        plan_streams([spec([8])], shuffle_algo="py1e", initial_physical_nodes=0)
    assert str(e.value) == "initial_physical_nodes must be >= 1, got 0"
    with pytest.raises(ConfigError) as e:
        plan_streams([spec([8])], initial_physical_nodes=2)
    assert str(e.value) == (
        "initial_physical_nodes: only a reference shuffle_algo (or shuffle=False) uses it (the "
        "shuffled 'astream' order does not depend on the World)"
    )
    p = plan_streams([spec([8])], shuffle=False, initial_physical_nodes=2)
    assert ids(p) == list(range(8))


@pytest.mark.parametrize(
    ("kw", "block"),
    [
        (dict(shuffle_algo="py1s", num_canonical_nodes=2), 2_000_000),  # the reference's
        (dict(shuffle_algo="py1e", num_canonical_nodes=64), 1 << 18),
        (dict(shuffle_algo="py1s", shuffle_block_size=7), 7),
        (dict(shuffle_algo="py1s", shuffle=False), 1 << 12),  # unshuffled: astream's
        (dict(shuffle=False, num_canonical_nodes=2), 1 << 12),
        (dict(num_canonical_nodes=2), 1 << 12),
        (dict(shuffle_block_size=9), 9),
    ],
)
def test_the_block_size_each_order_resolves(kw, block):
    assert plan_streams([spec([100, 100])], **kw).block_size == block


# -- the reference's per-stream work plans ---------------------------------------------------


def test_reference_stratified_with_epoch_size_and_no_weights_shares_by_stream_size():
    # as astream's own stratified order: a batch of 5 over streams of 10 and 20 samples holds
    # 2 of the first (size share 1/3), not 1 (chosen share 2/7 of epoch_size=7)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the streams' short batches are dropped, as said
        p = plan_streams(
            [spec([10]), spec([20])], shuffle_algo="py1s", batch_size=5,
            batching_method="stratified", global_batch_size=5, epoch_size=7,
        )  # fmt: skip
        batches = [b.tolist() for b in p.worker_batches(World(1, 1, 1), 0, 0)]
    assert [sum(i < 10 for i in b) for b in batches] == [2]


def test_reference_work_plan_keeps_its_partition_algo():
    p = plan_streams([spec([20]), spec([20])], shuffle_algo="py1s", batching_method="stratified",
                     global_batch_size=4, partition_algo="orig")  # fmt: skip
    assert p.partition_algo == "orig"
