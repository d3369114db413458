"""Property tests (hypothesis) for every guarantee of the epoch plan."""

from __future__ import annotations

from collections import Counter

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from astream.core.world import World

from .helpers import WORLDS_8, global_batches, plan, planned_rank_sequence, round_robin, shard_sizes

NCNS = st.sampled_from([1, 2, 4, 8])
BLOCKS = st.one_of(st.none(), st.integers(1, 50))
SETTINGS = settings(max_examples=40, deadline=None)


@SETTINGS
@given(shard_sizes, NCNS, st.integers(0, 2**40), st.integers(0, 5), st.booleans(), BLOCKS)
def test_every_sample_exactly_once(sizes, ncn, seed, epoch, shuffle, block):
    p = plan(
        sizes,
        num_canonical_nodes=ncn,
        seed=seed,
        epoch=epoch,
        shuffle=shuffle,
        shuffle_block_size=block,
    )
    ids = p.global_ids(0, p.num_samples)
    assert p.num_samples == sum(sizes)
    assert sorted(ids.tolist()) == list(range(sum(sizes)))


@SETTINGS
@given(shard_sizes, NCNS, st.integers(1, 4), st.booleans(), BLOCKS, st.integers(0, 2**32))
def test_global_batches_identical_on_every_world(sizes, ncn, bs, shuffle, block, seed):
    kw = dict(num_canonical_nodes=ncn, shuffle=shuffle, shuffle_block_size=block, seed=seed)
    reference = global_batches(plan(sizes, batch_size=8 * bs, **kw), World(1, 1, 1))
    p = plan(sizes, batch_size=bs, **kw)
    g = p.global_ids(0, p.padded_num_samples(World(1, 8, 1)))
    expected = [Counter(g[j : j + 8 * bs].tolist()) for j in range(0, len(g), 8 * bs)]
    assert reference == expected
    for world in WORLDS_8:
        assert global_batches(p, world) == expected, world


@SETTINGS
@given(
    shard_sizes,
    NCNS,
    st.integers(1, 3),
    st.booleans(),
    st.sampled_from([*WORLDS_8, World(2, 2, 3)]),
)
def test_round_robin_reproduces_rank_sequence(sizes, ncn, bs, shuffle, world):
    p = plan(sizes, num_canonical_nodes=ncn, batch_size=bs, shuffle=shuffle, shuffle_block_size=7)
    for rank in range(world.num_ranks):
        got = [i for b in round_robin(p, world, rank) for i in b.tolist()]
        assert got == planned_rank_sequence(p, world, rank)
        assert len(got) == p.rank_num_samples(world, rank)


@SETTINGS
@given(shard_sizes, NCNS, st.integers(1, 4), st.booleans(), st.data())
def test_padding_only_at_end_and_from_epoch_start(sizes, ncn, bs, shuffle, data):
    p = plan(sizes, num_canonical_nodes=ncn, batch_size=bs, shuffle=shuffle)
    world = data.draw(st.sampled_from(WORLDS_8))
    n, gb = p.num_samples, bs * world.num_ranks
    start = data.draw(st.integers(0, n))
    total = p.padded_num_samples(world, start)
    assert total == -(-(n - start) // gb) * gb and total - (n - start) < gb
    seq = p.global_ids(start, start + total)
    # the real samples come first, each exactly once, then the pad repeats the epoch's start
    assert sorted(seq[: n - start].tolist()) == sorted(p.global_ids(start, n).tolist())
    pad = seq[n - start :].tolist()
    assert pad == [p.global_ids(0, n)[i % n] for i in range(len(pad))]
    dealt = Counter(
        i
        for r in range(world.num_ranks)
        for b in round_robin(p, world, r, start)
        for i in b.tolist()
    )
    assert dealt == Counter(seq.tolist())


@SETTINGS
@given(shard_sizes, NCNS, st.integers(1, 3), st.booleans(), st.data())
def test_resume_is_the_suffix_on_any_world(sizes, ncn, bs, shuffle, data):
    p = plan(sizes, num_canonical_nodes=ncn, batch_size=bs, shuffle=shuffle, shuffle_block_size=5)
    first, second = data.draw(st.sampled_from(WORLDS_8)), data.draw(st.sampled_from(WORLDS_8))
    gb = bs * first.num_ranks
    n = p.num_samples
    # stop after some global batches on `first`, resume on `second` at the samples consumed
    stop_batches = data.draw(st.integers(0, -(-n // gb)))
    start = min(stop_batches * gb, n)
    before = global_batches(p, first)[:stop_batches]
    after = global_batches(p, second, start)
    uninterrupted = p.global_ids(0, n)
    consumed = sum(before, Counter())
    resumed = sum(after, Counter())
    assert consumed == Counter(p.global_ids(0, stop_batches * gb).tolist())
    # the resumed run yields exactly the suffix from `start` (plus its own end padding)
    real = Counter(uninterrupted[start:].tolist())
    assert resumed - real == Counter(
        p.global_ids(n, n + p.padded_num_samples(second, start) - (n - start)).tolist()
    )
    assert real - resumed == Counter()
    # and batch by batch it is the suffix of the global sequence
    g = p.global_ids(start, start + p.padded_num_samples(second, start))
    gb2 = bs * second.num_ranks
    assert after == [Counter(g[j : j + gb2].tolist()) for j in range(0, len(g), gb2)]


@SETTINGS
@given(shard_sizes, NCNS, st.integers(0, 2**32), st.booleans(), BLOCKS)
def test_deterministic(sizes, ncn, seed, shuffle, block):
    kw = dict(num_canonical_nodes=ncn, seed=seed, shuffle=shuffle, shuffle_block_size=block)
    a, b = plan(sizes, **kw), plan(sizes, **kw)
    assert a.global_ids(0, a.num_samples).tolist() == b.global_ids(0, b.num_samples).tolist()


@SETTINGS
@given(
    st.lists(st.integers(20, 60), min_size=2, max_size=8),
    NCNS,
    st.integers(0, 2**32),
    st.integers(0, 100),
)
def test_epochs_differ(sizes, ncn, seed, epoch):
    a = plan(sizes, num_canonical_nodes=ncn, seed=seed, epoch=epoch)
    b = plan(sizes, num_canonical_nodes=ncn, seed=seed, epoch=epoch + 1)
    assert a.global_ids(0, a.num_samples).tolist() != b.global_ids(0, b.num_samples).tolist()


@SETTINGS
@given(
    st.lists(st.integers(1, 30), min_size=1, max_size=25),
    NCNS,
    st.integers(1, 64),
    st.booleans(),
    st.integers(0, 2**32),
)
def test_shard_locality_bound(sizes, ncn, block, shuffle, seed):
    p = plan(sizes, num_canonical_nodes=ncn, shuffle_block_size=block, shuffle=shuffle, seed=seed)
    bound = 2 * block // min(sizes) + 4
    assert p.locality_bound() == bound
    n = p.num_samples
    for c in range(min(ncn, n)):
        node_pos = np.arange(c, n, ncn)  # one canonical node's positions, in order
        shards = p.shard_of(p.ids_at(node_pos))
        for lo in range(max(1, len(shards) - block + 1)):
            assert len(set(shards[lo : lo + block].tolist())) <= bound


@SETTINGS
@given(st.sampled_from([(8, World(4, 2, 2)), (8, World(2, 4, 1)), (2, World(4, 2, 1)),
                        (4, World(4, 1, 3)), (1, World(2, 2, 2))]),
       st.integers(1, 4), st.integers(0, 300))  # fmt: skip
def test_physical_node_reads_only_its_canonical_nodes(case, bs, start):
    ncn, world = case
    p = plan([37] * 12, num_canonical_nodes=ncn, batch_size=bs)
    start = min(start, p.num_samples)
    per_node: dict[int, set[int]] = {}
    for rank in range(world.num_ranks):
        nb = p.rank_num_samples(world, rank, start) // bs
        for j in range(nb):
            pos = p.rank_positions(world, rank, j, start)
            per_node.setdefault(world.node_of(rank), set()).update((pos % ncn).tolist())
    want = max(ncn // world.num_nodes, 1)
    assert all(len(nodes) == want for nodes in per_node.values()), per_node
    if ncn >= world.num_nodes:  # the nodes split the canonical nodes between them
        assert sorted(c for nodes in per_node.values() for c in nodes) == list(range(ncn))
