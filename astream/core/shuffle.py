"""Seeded randomness for the sample order: stable across machines and numpy versions.

Theory of operation
-------------------
Every random decision of the order draws from its own generator, keyed by a tuple of plain
non-negative ints ``(seed, purpose, epoch, node, block, ...)``:

- the key goes through :class:`numpy.random.SeedSequence` (a documented, version-stable hash;
  never Python's ``hash()``, which is salted per process), which seeds a :class:`PCG64` bit
  generator;
- only the RAW 64-bit output of PCG64 (``random_raw``) is used. numpy guarantees the PCG64 bit
  stream and SeedSequence's output for a given seed across versions (NEP 19), while the
  higher-level ``Generator`` methods (``permutation``, ``integers``, ...) may change their
  algorithms between releases. So we build what we need from raw words ourselves:

  * a permutation of ``n`` items is ``argsort`` of ``n`` raw words with a stable sort (ties, which
    need two equal 64-bit words, are then broken by index, still deterministically);
  * an integer in ``[0, n)`` is a raw word modulo ``n`` (bias < n / 2**64, negligible).

Assumptions: numpy >= 1.17 (SeedSequence/PCG64 exist) and IEEE-754-free integer arithmetic
only, so the same inputs give the same order on any machine, OS and numpy version.
"""

from __future__ import annotations

from typing import Final

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "PURPOSE_BATCHES",
    "PURPOSE_BLOCK",
    "PURPOSE_NODE",
    "PURPOSE_PARTIAL",
    "PURPOSE_RUN",
    "bit_generator",
    "permutation",
    "random_below",
    "raw_words",
]

# Purposes keep the generators of different decisions independent of each other.
PURPOSE_RUN: Final = 1  # per run: the order shards are laid out in before the node split
PURPOSE_NODE: Final = 2  # per epoch and canonical node: the order of its pieces
PURPOSE_BLOCK: Final = 3  # per epoch, node and block: the permutation inside the block
PURPOSE_PARTIAL: Final = 4  # per epoch (or run) and stream: which samples a partial repeat takes
PURPOSE_BATCHES: Final = 5  # per epoch (or run): the stream order of per-stream batches


def bit_generator(*key: int) -> np.random.PCG64:
    """A PCG64 seeded from the stable hash of ``key`` (non-negative ints)."""
    return np.random.PCG64(np.random.SeedSequence([int(k) for k in key]))


def raw_words(n: int, *key: int) -> NDArray[np.uint64]:
    """``n`` raw 64-bit words from the generator of ``key``."""
    if n <= 0:
        return np.zeros(0, np.uint64)
    words: NDArray[np.uint64] = bit_generator(*key).random_raw(n)
    return words


def permutation(n: int, *key: int) -> NDArray[np.int64]:
    """A permutation of ``range(n)`` drawn from the generator of ``key``."""
    order: NDArray[np.int64] = np.argsort(raw_words(n, *key), kind="stable").astype(np.int64)
    return order


def random_below(n: int, *key: int) -> int:
    """One integer in ``[0, n)`` drawn from the generator of ``key``."""
    if n <= 1:
        return 0
    return int(raw_words(1, *key)[0]) % n
