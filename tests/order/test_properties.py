"""Property tests (hypothesis) for every guarantee of the epoch plan."""

from __future__ import annotations

from collections import Counter

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from astream.core.world import World

from .helpers import (
    WORLDS_8,
    expected_global_batches,
    global_batches,
    plan,
    planned_rank_sequence,
    reference_deal,
    round_robin,
    shard_sizes,
)

NCNS = st.sampled_from([1, 2, 4, 8])
BLOCKS = st.one_of(st.none(), st.integers(1, 50))
SETTINGS = settings(max_examples=40, deadline=None)
# astream's own order is shuffled: shuffle=False plans the reference's unshuffled epoch, with the
# reference's padding and resume rounding (tests/order/test_reference_noshuffle.py)
OWN = st.just(True)


@SETTINGS
@given(shard_sizes, NCNS, st.integers(0, 2**40), st.integers(0, 5), OWN, BLOCKS)
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
@given(shard_sizes, NCNS, st.integers(1, 4), OWN, BLOCKS, st.integers(0, 2**32))
def test_global_batches_identical_on_every_world(sizes, ncn, bs, shuffle, block, seed):
    kw = dict(num_canonical_nodes=ncn, shuffle=shuffle, shuffle_block_size=block, seed=seed)
    reference = global_batches(plan(sizes, batch_size=8 * bs, **kw), World(1, 1, 1))
    p = plan(sizes, batch_size=bs, **kw)
    g = p.global_ids(0, p.num_samples)
    # one rank: exactly the epoch, cut into batches, the last one partial; no padding at all
    assert reference == [Counter(g[j : j + 8 * bs].tolist()) for j in range(0, len(g), 8 * bs)]
    pad = -p.num_samples % 8
    for world in WORLDS_8:
        got = global_batches(p, world)
        assert got == expected_global_batches(p, world), world
        # the same global batches as on one rank; the last one also holds the < 8 pad samples
        assert got[:-1] == reference[:-1]
        assert reference[-1] - got[-1] == Counter()
        assert sum((got[-1] - reference[-1]).values()) == pad


@SETTINGS
@given(
    shard_sizes,
    NCNS,
    st.integers(1, 3),
    st.booleans(),
    st.sampled_from([*WORLDS_8, World(2, 2, 3), World(3, 2, 2)]),
    st.data(),
)
def test_round_robin_reproduces_rank_sequence(sizes, ncn, bs, shuffle, world, data):
    p = plan(sizes, num_canonical_nodes=ncn, batch_size=bs, shuffle=shuffle, shuffle_block_size=7)
    start = data.draw(st.integers(0, p.num_samples))
    ref = reference_deal(p.num_samples, world, start)
    for rank in range(world.num_ranks):
        got = [i for b in round_robin(p, world, rank, start) for i in b.tolist()]
        assert got == planned_rank_sequence(p, world, rank, start)
        if shuffle:  # unshuffled: the reference's epoch, its resume rounded down to the nodes
            assert got == p.ids_at(np.array(ref[rank], np.int64)).tolist()
        assert len(got) == p.rank_num_samples(world, rank, start)


@SETTINGS
@given(shard_sizes, NCNS, st.integers(1, 4), OWN, st.data())
def test_padding_only_where_needed(sizes, ncn, bs, shuffle, data):
    p = plan(sizes, num_canonical_nodes=ncn, batch_size=bs, shuffle=shuffle)
    world = data.draw(st.sampled_from([*WORLDS_8, World(1, 1, 1), World(1, 1, 3)]))
    n, r = p.num_samples, world.num_ranks
    start = data.draw(st.integers(0, n))
    total = p.padded_num_samples(world, start)
    # every rank yields ceil(remaining / ranks): fewer than `ranks` pad samples in all
    assert total == -(-(n - start) // r) * r and total - (n - start) < r
    per_rank = [[i for b in round_robin(p, world, k, start) for i in b.tolist()] for k in range(r)]
    assert {len(x) for x in per_rank} == {total // r}
    assert all(p.rank_num_samples(world, k, start) == total // r for k in range(r))
    # every remaining sample exactly once; pads only as a rank's very last sample, repeating
    # a remaining sample
    dealt = Counter(i for x in per_rank for i in x)
    real = Counter(p.global_ids(start, n).tolist())
    assert real - dealt == Counter()
    assert sum((dealt - real).values()) == total - (n - start)
    assert set(dealt) == set(real)
    if r == 1:
        assert per_rank[0] == p.global_ids(start, n).tolist()  # one rank: exactly the suffix


@SETTINGS
@given(shard_sizes, NCNS, st.integers(1, 3), OWN, st.data())
def test_resume_is_the_suffix_on_any_world(sizes, ncn, bs, shuffle, data):
    p = plan(sizes, num_canonical_nodes=ncn, batch_size=bs, shuffle=shuffle, shuffle_block_size=5)
    first = data.draw(st.sampled_from(WORLDS_8))
    second = data.draw(st.sampled_from([*WORLDS_8, World(3, 1, 2), World(1, 1, 1)]))
    gb = bs * first.num_ranks
    n = p.num_samples
    # stop after some full global batches on `first`, resume on `second` at the samples consumed
    stop_batches = data.draw(st.integers(0, n // gb))
    start = stop_batches * gb
    before = global_batches(p, first)[:stop_batches]
    after = global_batches(p, second, start)
    consumed = sum(before, Counter())
    resumed = sum(after, Counter())
    assert consumed == Counter(p.global_ids(0, start).tolist())
    # the resumed run yields exactly the suffix from `start` (plus its own < ranks pads)
    real = Counter(p.global_ids(start, n).tolist())
    assert real - resumed == Counter()
    pads = resumed - real
    assert sum(pads.values()) == p.padded_num_samples(second, start) - (n - start)
    assert set(pads) <= set(real)
    # and batch by batch it is the suffix of the global sequence
    assert after == expected_global_batches(p, second, start)
    g = p.global_ids(start, n)
    gb2 = bs * second.num_ranks
    for j, batch in enumerate(after[:-1]):
        assert batch == Counter(g[j * gb2 : (j + 1) * gb2].tolist())


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
