"""batching_method="per_stream" (every global batch from one stream) and "device_per_stream"
(every device batch from one stream): World-independence, resumption, locality, errors."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from astream.core.order import StreamSpec, plan_epoch
from astream.core.world import World
from astream.errors import ConfigError

from .helpers import WORLDS_8, global_batches, round_robin

SETTINGS = settings(max_examples=25, deadline=None)
SIZES = [[13, 9, 20], [7, 7], [30, 11, 5, 8]]
OFFSETS = np.cumsum([0] + [sum(s) for s in SIZES])


def stream_of(ids) -> set[int]:
    return set(np.searchsorted(OFFSETS[1:], np.asarray(list(ids)), side="right").tolist())


def specs(weights=(0.5, 0.2, 0.3)):
    return [StreamSpec(np.array(s, np.int64), proportion=w) for s, w in zip(SIZES, weights)]


def make(method, **kw):
    args = dict(seed=11, epoch=1, num_canonical_nodes=4, batch_size=2, shuffle=True)
    args.update(kw)
    return plan_epoch(specs(), batching_method=method, **args)


WORLDS = [*WORLDS_8, World(1, 1, 1), World(1, 1, 3)]


@SETTINGS
# astream's own order (shuffled): unshuffled, every method is the reference's construction,
# which depends on the World (tests/order/test_reference_noshuffle.py)
@given(st.integers(1, 2), st.sampled_from([1, 2, 4]), st.just(True), st.integers(0, 2**32))
def test_per_stream_global_batches_are_one_stream_and_world_independent(bs, ncn, shuffle, seed):
    kw = dict(num_canonical_nodes=ncn, shuffle=shuffle, seed=seed)
    p = make("per_stream", batch_size=bs, global_batch_size=8 * bs, **kw)
    g = p.global_ids(0, p.num_samples)
    assert p.num_samples % (8 * bs) == 0
    chunks = [Counter(g[j : j + 8 * bs].tolist()) for j in range(0, len(g), 8 * bs)]
    assert all(len(stream_of(c)) == 1 for c in chunks)
    # every stream gives its whole global batches: floor(chosen / global batch) of them
    chosen = [55, 22, 33]  # 110 samples by proportions 0.5 / 0.2 / 0.3
    got = Counter(next(iter(stream_of(c))) for c in chunks)
    assert got == Counter({s: chosen[s] // (8 * bs) for s in range(3) if chosen[s] >= 8 * bs})
    for world in WORLDS_8:
        assert global_batches(p, world) == chunks, world  # no padding: whole global batches
    one = make("per_stream", batch_size=8 * bs, global_batch_size=8 * bs, **kw)
    assert global_batches(one, World(1, 1, 1)) == chunks


def test_per_stream_resumes_at_whole_global_batches_on_another_world():
    p = make("per_stream", global_batch_size=16)
    before = global_batches(p, World(2, 4, 2))
    for world in (World(8, 1, 1), World(1, 8, 3), World(4, 2, 1)):
        assert global_batches(p, world, 32) == before[2:]
    with pytest.raises(ConfigError) as e:
        next(p.worker_batches(World(2, 4, 2), 0, 0, 8))
    assert str(e.value) == (
        "start=8: batching_method='per_stream' resumes only at a whole global batch "
        "(a multiple of 16)"
    )
    with pytest.raises(ConfigError) as e:
        p.rank_num_samples(World(4, 4, 1), 0)
    assert str(e.value) == (
        "batching_method='per_stream': the plan's global batch of 16 samples is not a multiple "
        "of batch_size * num_ranks = 32; plan with global_batch_size equal to the training "
        "global batch"
    )


def test_per_stream_batch_order_follows_the_reference_seeding():
    """The stream order of the batches is seeded; it changes per epoch only when shuffling
    with balanced sampling (as the reference's generator)."""

    def streams(**kw):
        p = make("per_stream", global_batch_size=4, **kw)
        g = p.global_ids(0, p.num_samples)
        return [next(iter(stream_of(g[j : j + 4]))) for j in range(0, len(g), 4)]

    assert streams(epoch=1) != streams(epoch=2)
    assert streams(epoch=1, shuffle=False) == streams(epoch=2, shuffle=False)
    assert streams(epoch=1, sampling_method="fixed") == streams(epoch=2, sampling_method="fixed")
    assert sorted(streams()) == [0] * 13 + [1] * 5 + [2] * 8
    assert streams(shuffle=False) != sorted(streams(shuffle=False))  # interleaved, not in order


def test_per_stream_refuses_a_stream_without_one_full_batch():
    with pytest.raises(ConfigError) as e:
        make("per_stream", global_batch_size=32)
    assert str(e.value) == (
        "streams[1]: its 22 samples this epoch do not fill one global batch "
        "(global_batch_size=32); per-stream batching needs at least one full batch from "
        "every stream"
    )


def device_batches(p, world, start=0):
    """Every rank's batches, as tuples, by rank."""
    return [
        [tuple(b.tolist()) for b in round_robin(p, world, r, start)] for r in range(world.num_ranks)
    ]


@SETTINGS
@given(
    st.integers(1, 3),
    st.sampled_from([1, 2, 4]),
    st.just(True),  # astream's own order; unshuffled is the reference's
    st.integers(0, 2**32),
    st.sampled_from([*WORLDS, World(3, 1, 2), World(3, 2, 1)]),
)
def test_device_per_stream_every_device_batch_is_one_stream(bs, ncn, shuffle, seed, world):
    p = make("device_per_stream", batch_size=bs, num_canonical_nodes=ncn, shuffle=shuffle,
             seed=seed)  # fmt: skip
    n = p.num_samples
    g = p.global_ids(0, n)
    chunks = [tuple(g[j : j + bs].tolist()) for j in range(0, n, bs)]
    assert all(len(stream_of(c)) == 1 for c in chunks)
    # the epoch's chosen samples (those random batching would yield), less what does not fill
    # a whole device batch of its stream in its canonical node
    every = make("random", num_canonical_nodes=ncn, shuffle=shuffle, seed=seed)
    chosen = Counter(every.global_ids(0, every.num_samples).tolist())
    assert Counter(g.tolist()) - chosen == Counter()
    assert every.num_samples - n < 6 * ncn * bs  # < bs per (stream, node), and the min
    ranks = device_batches(p, world)
    assert len({len(r) for r in ranks}) == 1  # every rank the same number of batches ...
    assert all(len(b) == bs for r in ranks for b in r)  # ... all full
    assert all(len(stream_of(b)) == 1 for r in ranks for b in r)
    # the chunks of the World-independent sequence, dealt one per device; a device short of
    # one in the last global batch repeats its own batch of the global batch before
    dealt = Counter(b for r in ranks for b in r)
    assert Counter(chunks) - dealt == Counter()
    assert sum((dealt - Counter(chunks)).values()) == -len(chunks) % world.num_ranks
    r = world.num_ranks
    for j in range(len(ranks[0])):
        for k in range(r):
            slot = k // world.ranks_per_node + world.num_nodes * (k % world.ranks_per_node)
            q = j * r + slot
            want = chunks[q] if q < len(chunks) else chunks[q - r] if q >= r else chunks[slot]
            assert ranks[k][j] == want


def test_device_per_stream_nodes_read_their_own_canonical_nodes_and_resume():
    p = make("device_per_stream", num_canonical_nodes=4, batch_size=3)
    world = World(2, 2, 2)
    nodes: dict[int, set[int]] = {0: set(), 1: set()}
    for rank in range(world.num_ranks):
        for j in range(p.rank_num_samples(world, rank) // 3):
            pos = p.rank_positions(world, rank, j)
            nodes[world.node_of(rank)].update(((pos // 3) % 4).tolist())
    assert nodes == {0: {0, 2}, 1: {1, 3}}  # chunk q comes from canonical node q % 4
    full = device_batches(p, World(1, 4, 1))
    flat = [b for j in range(len(full[0])) for b in (full[k][j] for k in range(4))]
    resumed = device_batches(p, World(1, 2, 1), 12)  # 12 samples = 4 device batches in
    flat2 = [b for j in range(len(resumed[0])) for b in (resumed[k][j] for k in range(2))]
    assert flat2[: len(flat) - 4] == flat[4:len(flat)]  # fmt: skip
    with pytest.raises(ConfigError) as e:
        p.rank_num_samples(World(1, 2, 1), 0, 4)
    assert str(e.value) == (
        "start=4: batching_method='device_per_stream' resumes only at a whole device batch "
        "(a multiple of batch_size=3)"
    )


def test_device_per_stream_refuses_too_many_canonical_nodes():
    with pytest.raises(ConfigError) as e:
        make("device_per_stream", num_canonical_nodes=64, batch_size=2)
    assert str(e.value) == (
        "batching_method='device_per_stream': canonical node 0 of num_canonical_nodes=64 holds "
        "no full device batch (batch_size=2) of any stream; lower num_canonical_nodes or "
        "batch_size"
    )
