"""Canonical nodes and shuffle blocks: the world-independent sequence of one set of pieces.

Theory of operation
-------------------
Input: the pieces of an epoch (contiguous runs of sample ids, each inside one shard; see
:mod:`astream.core.mixing`), ``N`` positions in all. Output: a random-access map
``position -> id`` for positions ``0 <= p < N``, computed in O(log pieces) per position plus
O(block) once per block touched. Nothing here is O(N).

1. *Run layout* (depends on ``seed`` only, so a canonical node keeps its shards across epochs,
   which keeps caches warm): with ``shuffle`` the pieces are ordered by a seeded 64-bit key per
   shard (ties: generation order); without, they stay in index order.
2. *Canonical nodes*: node ``c`` gets ``L_c = ceil((N - c) / ncn)`` positions, the contiguous
   range of that layout starting at ``sum(L_0..L_{c-1}) = c * (N // ncn) + min(c, N % ncn)``.
   A piece that straddles two nodes is cut in two. A node is cut only when one of its positions
   is first read (O(log pieces + its pieces)), so nothing is O(ncn).
3. *Per epoch, per node* (``shuffle`` only): the node's pieces are put in a seeded order
   (key ``(seed, NODE, epoch, sub, c)``), and the node's positions are cut into blocks of
   ``block_size``. Node position ``t`` lies in block ``b = t // block_size``; the block's
   permutation (key ``(seed, BLOCK, epoch, sub, c, b)``) is materialised only when the block is
   first touched, and kept in a small LRU.
4. *Interleave*: global position ``p`` is position ``p // ncn`` of node ``p % ncn``, so the
   nodes interleave sample by sample and every ``ncn`` consecutive positions hold one sample of
   each node (while all nodes last).

*Reference layout* (``layout="reference"``, unshuffled only: the reference's index-order
layout, :func:`astream.core.refshuffle.canonical_index` on as many physical nodes as canonical
ones): node ``c`` holds the layout's positions ``[c * N // ncn, (c + 1) * N // ncn)``, and every
node is ``L = ceil(N / ncn)`` long, a shorter node repeating its last sample once; with fewer
positions than nodes, node ``c`` holds position ``c mod N``. The sequence is then ``ncn * L``
long.

Locality bound: a window of ``w <= block_size`` consecutive positions of one canonical node
lies inside at most two blocks, i.e. inside ``2 * block_size`` consecutive positions of the
node's piece order. Every piece but the node's first and last is a whole piece of length
``>= min_piece``, so the window touches at most ``floor(2 * block_size / min_piece) + 4``
distinct shards (``min_piece`` = the shortest piece before node cuts).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

# numpy.ma: np.unique imports it on its first call (~70 ms inside the first batch of every
# process); imported with astream instead, DataLoader workers inherit it from the fork
import numpy as np
import numpy.ma
from numpy.typing import NDArray

from astream.core.mixing import PartialSelection, Pieces
from astream.core.shuffle import PURPOSE_BLOCK, PURPOSE_NODE, PURPOSE_RUN, permutation, raw_words

__all__ = ["SubPlan", "locality_bound"]

I64 = NDArray[np.int64]
_CACHE_ELEMENTS = 1 << 24  # block permutations kept (int32/int64 entries), at least two blocks


def locality_bound(block_size: int, min_piece: int) -> int:
    """Max distinct shards in ``block_size`` consecutive positions of one canonical node."""
    return 2 * block_size // max(min_piece, 1) + 4


class SubPlan:
    """The sequence of one set of pieces over ``ncn`` canonical nodes (see module docstring)."""

    def __init__(
        self,
        pieces: Pieces,
        partials: dict[int, PartialSelection],
        *,
        ncn: int,
        shuffle: bool,
        seed: int,
        epoch: int,
        block_size: int,
        sub: int,
        num_shards: int,
        layout: str = "astream",
    ) -> None:
        if layout not in ("astream", "reference") or (layout == "reference" and shuffle):
            raise ValueError(f"layout={layout!r}: 'astream', or 'reference' unshuffled")
        self.partials = partials
        self.ncn = ncn
        self.shuffle = shuffle
        self.layout = layout
        self.block_size = block_size
        self._key = (seed, epoch, sub)
        self.min_piece = int(pieces.length.min()) if len(pieces.length) else 0
        if shuffle and len(pieces.length):
            shard_key = raw_words(num_shards, seed, PURPOSE_RUN)
            pieces = pieces.take(np.argsort(shard_key[pieces.shard], kind="stable"))
        self._n = int(pieces.length.sum())  # positions of the run layout
        self._width = -(-self._n // ncn)  # the reference layout's L
        self.num_samples = ncn * self._width if layout == "reference" else self._n
        self._pieces = pieces
        self._ends = np.cumsum(pieces.length)
        # canonical nodes are cut lazily: only the nodes a position touches cost anything, so
        # planning is never O(ncn) (ncn may be far larger than the epoch)
        self._nodes: dict[int, tuple[I64, Pieces]] = {}
        self._blocks: OrderedDict[tuple[int, int], NDArray[np.signedinteger]] = OrderedDict()
        self._cached = 0
        self._lock = threading.Lock()  # a prefetcher thread and the consumer may share a plan

    def node_len(self, c: int | I64) -> int | I64:
        """Positions of canonical node(s) ``c``: ``ceil((N - c) / ncn)`` (O(1), vectorised);
        ``L`` for each under the reference layout."""
        if self.layout == "reference":
            return np.full_like(c, self._width) if isinstance(c, np.ndarray) else self._width
        out: int | I64 = (self._n - c + self.ncn - 1) // self.ncn
        return out

    def node_start(self, c: int) -> int:
        """First position of node ``c`` in the run layout: ``sum(node_len(0..c-1))`` (under
        the reference layout ``c * N // ncn``, or ``c mod N`` with fewer positions than
        nodes)."""
        if self.layout == "reference":
            return c * self._n // self.ncn if self._n >= self.ncn else c % max(self._n, 1)
        q, r = divmod(self._n, self.ncn)
        return c * q + min(c, r)

    def _node_range(self, c: int) -> tuple[int, int]:
        """[lo, hi) of the run layout that node ``c`` holds (its repeat aside)."""
        lo = self.node_start(c)
        if self.layout == "reference":
            if self._n < self.ncn:
                return lo, lo + min(1, self._n)
            return lo, (c + 1) * self._n // self.ncn
        return lo, lo + int(self.node_len(c))

    def _node(self, c: int) -> tuple[I64, Pieces]:
        hit = self._nodes.get(c)
        if hit is not None:
            return hit
        pieces, ends = self._pieces, self._ends
        lo, hi = self._node_range(c)
        if hi == lo:
            node = (np.zeros(1, np.int64), pieces.take(np.zeros(0, np.int64)))
        else:
            first = int(np.searchsorted(ends, lo, side="right"))
            last = int(np.searchsorted(ends, hi, side="left"))
            part = pieces.take(np.arange(first, last + 1))
            cut_head = lo - (int(ends[first]) - int(pieces.length[first]))
            part.a[0] += cut_head
            part.length[0] -= cut_head
            part.length[-1] -= int(ends[last]) - hi
            if hi - lo < int(self.node_len(c)):  # the reference's repeat of the node's last
                rep = part.take(np.array([len(part.length) - 1]))
                rep.a[0] += int(rep.length[0]) - 1
                rep.length[0] = 1
                part = Pieces.concat([part, rep])
            if self.shuffle:
                seed, epoch, sub = self._key
                part = part.take(permutation(len(part.length), seed, PURPOSE_NODE, epoch, sub, c))
            starts = np.concatenate([[0], np.cumsum(part.length)]).astype(np.int64)
            node = (starts, part)
        self._nodes[c] = node
        return node

    def __getstate__(self) -> dict[str, object]:
        state = self.__dict__.copy()
        state["_blocks"], state["_cached"], state["_lock"] = OrderedDict(), 0, None
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def _block(self, c: int, b: int) -> NDArray[np.signedinteger]:
        """Block ``b``'s permutation in node ``c`` (cached). The lock guards the cache only, not
        the computation: a thread warming the next block never makes a reader of a cached
        block wait (the asyncio path warms blocks ahead in a thread)."""
        with self._lock:
            hit = self._blocks.get((c, b))
            if hit is not None:
                self._blocks.move_to_end((c, b))
                return hit
        size = min(self.block_size, int(self.node_len(c)) - b * self.block_size)
        seed, epoch, sub = self._key
        perm = permutation(size, seed, PURPOSE_BLOCK, epoch, sub, c, b)
        small = perm.astype(np.int32) if size < 2**31 else perm
        with self._lock:
            hit = self._blocks.get((c, b))
            if hit is not None:  # computed meanwhile by another thread: the same permutation
                return hit
            while self._blocks and self._cached + size > _CACHE_ELEMENTS and len(self._blocks) >= 2:
                _, old = self._blocks.popitem(last=False)
                self._cached -= len(old)
            self._blocks[(c, b)] = small
            self._cached += size
        return small

    def node_order(self, c: int, t: I64) -> I64:
        """Index in node ``c``'s piece order of node positions ``t`` (the block shuffle)."""
        if not self.shuffle:
            return t
        bs = self.block_size
        blocks = t // bs
        out = np.empty_like(t)
        for b in np.unique(blocks).tolist():
            m = blocks == b
            out[m] = b * bs + self._block(c, b)[t[m] - b * bs]
        return out

    def node_ids(self, c: int, t: I64) -> I64:
        """Ids at positions ``t`` of canonical node ``c``."""
        starts, part = self._node(c)
        u = self.node_order(c, t)
        k = np.searchsorted(starts, u, side="right") - 1
        key = part.a[k] + (u - starts[k])
        kind = part.kind[k]
        if not kind.any():
            return key
        out = key.copy()
        stream = part.stream[k]
        for s in np.unique(stream[kind == 1]).tolist():
            m = (kind == 1) & (stream == s)
            out[m] = self.partials[s].ids(key[m])
        return out

    def node_shards(self, c: int, t: I64) -> I64:
        """Shard indices at positions ``t`` of canonical node ``c``."""
        starts, part = self._node(c)
        k = np.searchsorted(starts, self.node_order(c, t), side="right") - 1
        shards: I64 = part.shard[k]
        return shards

    def ids_at(self, pos: I64) -> I64:
        """Ids at global positions ``pos`` (each ``0 <= p < num_samples``)."""
        ncn = self.ncn
        if ncn == 1:
            return self.node_ids(0, pos)
        nodes = pos % ncn
        t = pos // ncn
        out = np.empty_like(pos)
        for c in np.unique(nodes).tolist():
            m = nodes == c
            out[m] = self.node_ids(c, t[m])
        return out
