"""SubPlan's invariants that a wrong constant or a dropped line in partition.py would break:
the run layout's tie order, every node's piece table, the block cache (LRU order, its element
count, its budget, its int32 narrowing, a block computed twice), pickling, and node_shards.

Plans are built straight from hand-made pieces, so every expected value is written out here.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from astream.core import partition
from astream.core.mixing import Pieces
from astream.core.partition import SubPlan
from astream.core.shuffle import PURPOSE_RUN, raw_words
from astream.core.shuffle import permutation as shuffle_permutation

SEED = 7


def make_pieces(lengths: list[int], shards: list[int], a: list[int] | None = None) -> Pieces:
    length = np.asarray(lengths, np.int64)
    n = len(length)
    first = (np.cumsum(length) - length) if a is None else a
    return Pieces(
        length,
        np.zeros(n, np.int8),
        np.asarray(first, np.int64).reshape(n),
        np.asarray(shards, np.int64).reshape(n),
        np.zeros(n, np.int32),
    )


def make_sub(p: Pieces, *, ncn: int = 1, shuffle: bool = True, block_size: int = 40,
             num_shards: int | None = None) -> SubPlan:  # fmt: skip
    shards = num_shards if num_shards is not None else int(p.shard.max(initial=-1)) + 1
    return SubPlan(p, {}, ncn=ncn, shuffle=shuffle, seed=SEED, epoch=0,
                   block_size=block_size, sub=0, num_shards=shards)  # fmt: skip


def whole_shards(sizes: list[int], **kw: object) -> SubPlan:
    """One piece per shard, ids numbered shard after shard."""
    return make_sub(make_pieces(sizes, list(range(len(sizes)))), **kw)  # type: ignore[arg-type]


def assert_cache_consistent(s: SubPlan) -> None:
    assert s._cached == sum(len(v) for v in s._blocks.values())


def touch(s: SubPlan, *blocks: int) -> None:
    for b in blocks:
        s.node_order(0, np.array([b * s.block_size], np.int64))


# -- run layout ------------------------------------------------------------------------------


def test_pieces_of_one_shard_keep_generation_order_in_the_run_layout() -> None:
    # 280 one-sample pieces over 7 shards (shard = i % 7, id = i): the run layout sorts the
    # shards by a seeded key, and pieces of one shard keep the order they were generated in
    n, shards = 280, 7
    shard = [i % shards for i in range(n)]
    s = make_sub(make_pieces([1] * n, shard, list(range(n))), ncn=n, num_shards=shards)
    key = raw_words(shards, SEED, PURPOSE_RUN)
    expected = sorted(range(n), key=lambda i: int(key[shard[i]]))  # Python's sort is stable
    # ncn == n: node c holds exactly run-layout position c, and position c is node c's first
    assert s.ids_at(np.arange(n, dtype=np.int64)).tolist() == expected


def test_no_pieces_make_an_empty_plan() -> None:
    s = make_sub(make_pieces([], []), ncn=3, num_shards=4)
    assert (s.num_samples, s.min_piece) == (0, 0)
    out = s.ids_at(np.zeros(0, np.int64))
    assert out.dtype == np.int64 and out.shape == (0,)


# -- the piece table of every node -----------------------------------------------------------


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("sizes,ncn", [([2, 3], 8), ([5, 9, 3, 12, 7, 1, 8], 3)])
def test_every_node_table_is_int64_prefix_sums_of_its_pieces(
    sizes: list[int], ncn: int, shuffle: bool
) -> None:
    s = whole_shards(sizes, ncn=ncn, shuffle=shuffle, block_size=4)
    total = 0
    for c in range(ncn):
        starts, part = s._node(c)
        assert starts.dtype == np.int64
        assert starts.tolist() == [0, *np.cumsum(part.length).tolist()]
        assert starts[-1] == s.node_len(c) and part.length.ndim == 1
        assert (part.length > 0).all()  # a node with no positions has no pieces at all
        total += int(part.length.sum())
        got = s.node_ids(c, np.zeros(0, np.int64))
        assert got.dtype == np.int64 and got.shape == (0,)
    assert total == sum(sizes)
    if ncn > sum(sizes):  # nodes past the epoch's end hold nothing
        assert [len(s._node(c)[1].length) for c in range(ncn)] == [1] * 5 + [0] * 3


def test_node_tables_are_cut_once_and_only_for_nodes_read() -> None:
    s = whole_shards([5, 9, 3, 12, 7, 1, 8], ncn=5, block_size=4)
    ids = s.ids_at(np.array([1, 3, 6], np.int64))  # nodes 1, 3, 1
    assert ids.dtype == np.int64
    assert sorted(s._nodes) == [1, 3]
    assert s._node(1) is s._node(1)
    one = whole_shards([5, 9, 3, 12, 7, 1, 8], ncn=1, block_size=4)
    got = one.ids_at(np.arange(45, dtype=np.int64))
    assert got.dtype == np.int64 and sorted(got.tolist()) == list(range(45))


@pytest.mark.parametrize("shuffle", [True, False])
def test_node_shards_name_the_shard_of_each_id(shuffle: bool) -> None:
    sizes = [5, 9, 3, 12, 7, 1, 8]
    bounds = np.cumsum(sizes)
    s = whole_shards(sizes, ncn=3, shuffle=shuffle, block_size=4)
    for c in range(3):
        t = np.arange(int(s.node_len(c)), dtype=np.int64)
        ids = s.node_ids(c, t)
        shards = s.node_shards(c, t)
        assert shards.tolist() == np.searchsorted(bounds, ids, side="right").tolist()
    # node 0 of the unshuffled layout is ids 0..14: shard 0 five times, then shard 1 nine
    # times, then shard 2 once
    if not shuffle:
        head = s.node_shards(0, np.arange(15, dtype=np.int64)).tolist()
        assert head == [0] * 5 + [1] * 9 + [2]


# -- the block cache -------------------------------------------------------------------------


def test_blocks_are_narrowed_to_int32() -> None:
    s = whole_shards([200], block_size=100)
    block = s._block(0, 1)
    assert block.dtype == np.int32 and sorted(block.tolist()) == list(range(100))


class _HugePermutation:
    """Stands in for the permutation of a block of more than 2**31 positions (16 GiB as
    int64): its values do not fit in int32, so it must be kept as it is."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def astype(self, dtype: object) -> object:
        raise AssertionError(f"a block of {self.n} positions narrowed to {dtype}")


def test_blocks_past_int32_are_not_narrowed(monkeypatch: pytest.MonkeyPatch) -> None:
    n = 2**31 + 1
    s = whole_shards([n], block_size=n)
    monkeypatch.setattr(partition, "permutation", lambda size, *key: _HugePermutation(size))
    got = s._block(0, 0)
    assert isinstance(got, _HugePermutation) and got.n == n
    assert s._cached == n


def test_block_cache_evicts_least_recently_used(monkeypatch: pytest.MonkeyPatch) -> None:
    t = np.arange(200, dtype=np.int64)
    expected = whole_shards([200], block_size=40).node_order(0, t).tolist()  # no eviction
    monkeypatch.setattr(partition, "_CACHE_ELEMENTS", 100)
    s = whole_shards([200], block_size=40)  # blocks of 40: two fit in 100, three do not
    touch(s, 0, 1)
    assert list(s._blocks) == [(0, 0), (0, 1)] and s._cached == 80
    touch(s, 0)  # a hit makes block 0 the most recent
    assert list(s._blocks) == [(0, 1), (0, 0)] and s._cached == 80
    touch(s, 2)  # 80 + 40 > 100: block 1, the least recent, goes
    assert list(s._blocks) == [(0, 0), (0, 2)] and s._cached == 80
    assert_cache_consistent(s)
    assert s.node_order(0, t).tolist() == expected  # eviction never changes the order
    assert_cache_consistent(s)


def test_block_cache_fills_its_budget_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(partition, "_CACHE_ELEMENTS", 120)
    s = whole_shards([200], block_size=40)
    touch(s, 0, 1, 2)  # 120 elements: exactly the budget, nothing goes
    assert list(s._blocks) == [(0, 0), (0, 1), (0, 2)] and s._cached == 120
    touch(s, 3)
    assert list(s._blocks) == [(0, 1), (0, 2), (0, 3)] and s._cached == 120
    touch(s, 4)  # the last block is 40 too (200 = 5 * 40)
    assert list(s._blocks) == [(0, 2), (0, 3), (0, 4)] and s._cached == 120
    assert_cache_consistent(s)


def test_block_cache_keeps_two_blocks_over_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(partition, "_CACHE_ELEMENTS", 30)  # smaller than one block
    s = whole_shards([130], block_size=40)  # blocks 40, 40, 40, 10
    touch(s, 0, 1)
    assert list(s._blocks) == [(0, 0), (0, 1)] and s._cached == 80
    touch(s, 2, 3)
    assert list(s._blocks) == [(0, 2), (0, 3)] and s._cached == 50
    assert_cache_consistent(s)


def test_block_computed_meanwhile_is_kept_once(monkeypatch: pytest.MonkeyPatch) -> None:
    s = whole_shards([200], block_size=40)
    real = shuffle_permutation
    inner: list[object] = []

    def racing(size: int, *key: int) -> np.ndarray:
        if not inner:  # another thread finishes the same block while this one computes it
            inner.append(None)
            inner.append(s._block(0, 0))
        return real(size, *key)

    monkeypatch.setattr(partition, "permutation", racing)
    got = s._block(0, 0)
    assert got is inner[1]  # the first one cached wins
    assert list(s._blocks) == [(0, 0)] and s._cached == 40
    assert_cache_consistent(s)


def test_pickled_plan_drops_its_block_cache() -> None:
    s = whole_shards([5, 9, 3, 12, 7, 1, 8], ncn=2, block_size=4)
    pos = np.arange(s.num_samples, dtype=np.int64)
    ids = s.ids_at(pos).tolist()
    assert s._blocks and s._cached > 0
    back = pickle.loads(pickle.dumps(s))
    assert len(back._blocks) == 0 and back._cached == 0
    assert back.ids_at(pos).tolist() == ids
    assert_cache_consistent(back)
    assert back._cached == 45  # every block once: 23 + 22 positions


# -- the reference layout --------------------------------------------------------------------


def reference_sub(sizes: list[int], ncn: int) -> SubPlan:
    p = make_pieces(sizes, list(range(len(sizes))))
    return SubPlan(p, {}, ncn=ncn, shuffle=False, seed=SEED, epoch=0, block_size=4, sub=0,
                   num_shards=len(sizes), layout="reference")  # fmt: skip


@pytest.mark.parametrize("layout,shuffle", [("reference", True), ("REFERENCE", False), ("", False)])
def test_layouts_refused(layout: str, shuffle: bool) -> None:
    with pytest.raises(ValueError, match=f"^layout='{layout}': 'astream', or 'reference' unsh"):
        SubPlan(make_pieces([3], [0]), {}, ncn=1, shuffle=shuffle, seed=SEED, epoch=0,
                block_size=4, sub=0, num_shards=1, layout=layout)  # fmt: skip


def test_reference_layout_repeats_the_last_sample_of_short_nodes() -> None:
    # 10 positions on 3 nodes: node c holds [c * 10 // 3, (c + 1) * 10 // 3) = [0, 3), [3, 6),
    # [6, 10), and every node is ceil(10 / 3) = 4 long, so nodes 0 and 1 repeat their last
    # sample once. Shard 0 ends exactly where node 0 does.
    s = reference_sub([3, 4, 3], 3)
    assert s.num_samples == 12
    assert s.ids_at(np.arange(12, dtype=np.int64)).tolist() == [0, 3, 6, 1, 4, 7, 2, 5, 8, 2, 5, 9]
    tables = []
    for c in range(3):
        starts, part = s._node(c)
        assert starts.dtype == np.int64 and starts[-1] == s.node_len(c) == 4
        assert starts.tolist() == [0, *np.cumsum(part.length).tolist()]
        assert (part.length > 0).all()
        tables.append((part.a.tolist(), part.length.tolist()))
    # node 0: ids 0..2 then 2 again; node 1: 3..5 then 5; node 2: 6, then 7..9 (no repeat)
    assert tables == [([0, 2], [3, 1]), ([3, 5], [3, 1]), ([6, 7], [1, 3])]


@pytest.mark.parametrize("sizes,ids", [([1], [0, 0, 0]), ([2], [0, 1, 0]), ([1, 1], [0, 1, 0])])
def test_reference_layout_with_fewer_positions_than_nodes(sizes: list[int], ids: list[int]) -> None:
    # node c holds position c mod N, one long
    s = reference_sub(sizes, 3)
    assert s.num_samples == 3
    assert s.ids_at(np.arange(3, dtype=np.int64)).tolist() == ids
    assert [s.node_start(c) for c in range(3)] == [c % sum(sizes) for c in range(3)]


def test_reference_node_len_keeps_the_caller_shape() -> None:
    s = reference_sub([3, 4, 3], 3)
    one = s.node_len(2)
    assert type(one) is int and one == 4  # hashable, like astream's layout gives
    many = s.node_len(np.arange(3, dtype=np.int64))
    assert isinstance(many, np.ndarray) and many.dtype == np.int64 and many.tolist() == [4, 4, 4]
    own = whole_shards([3, 4, 3], ncn=3, shuffle=False)
    assert type(own.node_len(2)) is int
    assert np.asarray(own.node_len(np.arange(3, dtype=np.int64))).tolist() == [4, 3, 3]
