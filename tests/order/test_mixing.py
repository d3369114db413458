"""Mixing: proportion / repeat / choose / epoch_size, sampling and batching methods."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st

from astream.core.order import StreamSpec, plan_epoch
from astream.core.world import World

from .helpers import WORLDS_8, expected_global_batches, global_batches

SETTINGS = settings(max_examples=30, deadline=None)
sizes_st = st.lists(st.integers(1, 30), min_size=1, max_size=6)


def spec(sizes, **kw):
    return StreamSpec(np.array(sizes, np.int64), **kw)


def mixed(streams, **kw):
    args = dict(seed=3, epoch=0, num_canonical_nodes=2, batch_size=2, shuffle=True)
    args.update(kw)
    return plan_epoch(streams, **args)


def per_stream(ids, sizes_per_stream):
    bounds = np.cumsum([sum(s) for s in sizes_per_stream])
    return np.bincount(np.searchsorted(bounds, ids, side="right"), minlength=len(bounds))


def test_relative_proportions_largest_remainder():
    a, b = [10, 10], [7, 8]  # 20 and 15 samples
    p = mixed([spec(a, proportion=2.0), spec(b, proportion=1.0)], epoch_size=10)
    ids = p.global_ids(0, p.num_samples)
    # 10 * 2/3 = 6.67 -> 6 (+1 remainder), 10 * 1/3 = 3.33 -> 3
    assert per_stream(ids, [a, b]).tolist() == [7, 3]
    assert len(set(ids.tolist())) == 10  # a partial repeat takes distinct samples


def test_relative_default_epoch_size_is_dataset_size():
    a, b = [10, 10], [5]
    p = mixed([spec(a, proportion=0.5), spec(b, proportion=0.5)])
    assert p.num_samples == 25
    counts = Counter(p.global_ids(0, 25).tolist())
    # 12.5 each: the tie on the remainder goes to the lower stream index -> 13 and 12;
    # stream b (5 samples) upsampled to 12: two full copies plus 2 distinct samples
    assert sum(counts[i] for i in range(20)) == 13
    assert sorted(counts[i] for i in range(20, 25)) == [2, 2, 2, 3, 3]


@SETTINGS
@given(sizes_st, st.floats(0.05, 4.0), st.integers(0, 2**32), st.integers(1, 5))
def test_repeat_full_copies_plus_distinct_partial(sizes, repeat, seed, gran):
    assume(np.floor(repeat * sum(sizes)) > 0)
    p = mixed([spec(sizes, repeat=repeat)], seed=seed, sampling_granularity=gran)
    n = sum(sizes)
    chosen = int(np.floor(repeat * n))
    counts = Counter(p.global_ids(0, p.num_samples).tolist())
    assert p.num_samples == chosen
    q, r = divmod(chosen, n)
    assert all(counts[i] in (q, q + 1) for i in range(n))
    assert sum(1 for i in range(n) if counts[i] == q + 1) == r


def test_choose_absolute_and_unweighted_streams():
    a, b = [4, 4], [3, 3, 3]
    p = mixed([spec(a, choose=11), spec(b)])
    ids = p.global_ids(0, p.num_samples)
    assert per_stream(ids, [a, b]).tolist() == [11, 9]
    assert sorted(i for i in ids.tolist() if i >= 8) == list(range(8, 17))


def test_epoch_size_with_unspecified_weights_is_proportional_to_size():
    a, b = [30], [10]
    p = mixed([spec(a), spec(b)], epoch_size=8)
    assert per_stream(p.global_ids(0, 8), [a, b]).tolist() == [6, 2]


def test_balanced_redraws_partial_each_epoch_fixed_keeps_it():
    s = [spec([50, 50, 50], repeat=0.3)]
    sets = {
        m: [
            frozenset(mixed(s, epoch=e, sampling_method=m).global_ids(0, 45).tolist())
            for e in range(4)
        ]
        for m in ("balanced", "fixed")
    }
    assert len(set(sets["fixed"])) == 1
    assert len(set(sets["balanced"])) == 4


def test_granularity_draws_runs_from_the_same_shard():
    n, r, g = 100, 30, 5
    for seed in range(5):
        # astream's own (shuffled) order: unshuffled, the picks are the reference's draw
        p = mixed([spec([n], choose=r)], seed=seed, sampling_granularity=g, shuffle=True)
        chosen = sorted(p.global_ids(0, r).tolist())
        starts = [i for i in chosen if (i - 1) % n not in chosen]  # cyclic runs
        assert len(starts) == r // g
        p1 = mixed([spec([n], choose=r)], seed=seed, sampling_granularity=1, shuffle=True)
        chosen1 = set(p1.global_ids(0, r).tolist())
        assert len([i for i in chosen1 if (i - 1) % n not in chosen1]) == r


@SETTINGS
@given(
    st.lists(sizes_st, min_size=2, max_size=3),
    st.integers(0, 2**32),
    st.integers(8, 24),
    st.just(True),  # astream's own order; unshuffled is the reference's (test_reference_noshuffle)
)
def test_stratified_every_stratum_exact(streams, seed, stratum, shuffle):
    props = [1.0 + i for i in range(len(streams))]
    specs = [spec(s, proportion=w) for s, w in zip(streams, props)]
    p = mixed(
        specs,
        seed=seed,
        batching_method="stratified",
        global_batch_size=stratum,
        shuffle=shuffle,
        epoch_size=4 * stratum,
    )
    # the reference's make-up: int(stratum * share), then +1 to the largest fractional parts
    # in the order of its reversed argsort (of equal parts, the later stream first)
    share = np.array(props) / sum(props)
    k = np.array([int(x * stratum) for x in share])
    left = stratum * share - k
    k[np.flip(np.argsort(left))[: stratum - k.sum()]] += 1
    assert p.num_samples % stratum == 0 and p.num_samples > 0
    g = p.global_ids(0, p.num_samples)
    for j in range(0, p.num_samples, stratum):
        assert per_stream(g[j : j + stratum], streams).tolist() == k.tolist()
    # no stream repeats a sample before exhausting its chosen count
    chosen = p.num_samples // stratum * k
    counts = Counter(g.tolist())
    for s, sizes in enumerate(streams):
        lo = sum(sum(x) for x in streams[:s])
        n = sum(sizes)
        q, r = divmod(int(chosen[s]), n)
        assert all(counts[i] in (q, q + 1) for i in range(lo, lo + n))
        assert sum(counts[i] == q + 1 for i in range(lo, lo + n)) == r


@pytest.mark.parametrize("method", ["random", "stratified"])
def test_mixed_plans_keep_world_invariance_and_resume(method):
    specs = [spec([13, 9, 20], proportion=0.6), spec([7, 7], proportion=0.4)]
    p = mixed(
        specs,
        batch_size=2,
        batching_method=method,
        global_batch_size=16,
        num_canonical_nodes=4,
        shuffle_block_size=6,
    )
    big = mixed(
        specs,
        batch_size=16,
        batching_method=method,
        global_batch_size=16,
        num_canonical_nodes=4,
        shuffle_block_size=6,
    )
    ref = global_batches(big, World(1, 1, 1))
    for world in WORLDS_8:
        got = global_batches(p, world)
        assert got == expected_global_batches(p, world)
        assert got[:-1] == ref[:-1] and ref[-1] - got[-1] == Counter()
    start = 2 * 16
    for world in WORLDS_8[:2]:
        got = global_batches(p, world, start)
        assert got[:-1] == global_batches(big, World(1, 1, 3), start)[:-1]
        assert got == expected_global_batches(p, world, start)
        assert got[:1] == ref[2:3]


weights_st = st.one_of(
    st.tuples(st.just("proportion"), st.floats(0.1, 3.0)),
    st.tuples(st.just("repeat"), st.floats(0.2, 2.5)),
    st.tuples(st.just("choose"), st.integers(1, 60)),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(sizes_st, weights_st), min_size=1, max_size=3), st.integers(0, 2**32),
       st.sampled_from([1, 2, 4]), st.integers(1, 3), st.integers(1, 12), st.data())  # fmt: skip
def test_mixed_random_batching_keeps_every_guarantee(streams, seed, ncn, gran, block, data):
    kind = streams[0][1][0]
    specs = [spec(s, **{kind: w[1] if w[0] == kind else (1.0 if kind != "choose" else 5)})
             for s, w in streams]  # fmt: skip
    kw = dict(seed=seed, num_canonical_nodes=ncn, sampling_granularity=gran,
              shuffle_block_size=block)  # fmt: skip
    try:
        p = mixed(specs, batch_size=1, **kw)
    except Exception as e:  # weights that choose nothing are a ConfigError, nothing else
        assert str(e) == "streams: the weights choose no sample at all for this epoch"
        event("chooses nothing")
        return
    event("planned")
    n = p.num_samples
    g = p.global_ids(0, n)
    # exactly once: stream s's samples appear q or q+1 times, r of them q+1 times
    counts = Counter(g.tolist())
    lo = 0
    for (sizes, _), c in zip(streams, per_stream(g, [s for s, _ in streams])):
        m = sum(sizes)
        q, r = divmod(int(c), m)
        assert [counts[i] for i in range(lo, lo + m)].count(q + 1) == r
        assert all(counts[i] in (q, q + 1) for i in range(lo, lo + m))
        lo += m
    # world invariance and resumption, on a mixed dataset
    big = mixed(specs, batch_size=8, **kw)
    world = data.draw(st.sampled_from(WORLDS_8))
    ref = global_batches(big, World(1, 1, 1))
    got = global_batches(p, world)
    assert got == expected_global_batches(p, world)
    assert got[:-1] == ref[:-1] and ref[-1] - got[-1] == Counter()
    start = data.draw(st.integers(0, len(ref))) * 8
    start = min(start, n)
    assert global_batches(p, world, start) == expected_global_batches(p, world, start)
    # locality bound holds on mixed pieces too
    bound = p.locality_bound()
    for c in range(min(ncn, n)):
        shards = p.shard_of(p.ids_at(np.arange(c, n, ncn)))
        for i in range(max(1, len(shards) - block + 1)):
            assert len(set(shards[i : i + block].tolist())) <= bound
