"""Which shard the node cache drops when it needs room, in one process on real files.

Three cached shards A, B, C, last read in that order (A least recently). The node's future (the
hook the engine sets while an iteration runs) says A is read again at tick 5, B never, C at
tick 10. A reservation that needs one shard's room evicts exactly one shard: under
``next_use`` B (furthest use), under ``lru`` A (oldest), and with no future hook set (random
access, no iteration) the least recently used as well.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence

import pytest

from astream.core.eviction import NEVER
from astream.runtime.cache import CacheSpace, ShardFiles

SIZE = 1000
NEXT = {"A.mds": 5, "B.mds": NEVER, "C.mds": 10}


def _cache(root: str, policy: str, with_future: bool) -> tuple[CacheSpace, list[int]]:
    shards = [ShardFiles(root, name, SIZE) for name in ("A.mds", "B.mds", "C.mds")]
    for k, sf in enumerate(shards):
        with open(sf.raw_path, "wb") as f:
            f.write(b"x" * SIZE)
        os.utime(sf.raw_path, (1_000_000 + k, 1_000_000 + k))  # A oldest, C newest
    space = CacheSpace([root], limit=3 * SIZE, policy=policy)
    space.register(shards)
    asked: list[int] = []

    def future(files: list[ShardFiles]) -> Sequence[int]:
        asked.append(len(files))
        return [NEXT[sf.raw] for sf in files]

    if with_future:
        space.future = future
    return space, asked


def _reserve_one_shard(root: str, space: CacheSpace) -> list[str]:
    new = os.path.join(root, "D.mds")

    def materialize() -> None:
        with open(new, "wb") as f:
            f.write(b"y" * SIZE)

    assert asyncio.run(space.reserve(SIZE, materialize, block=True))
    return sorted(n for n in os.listdir(root) if n.endswith(".mds"))


@pytest.mark.parametrize(
    ("policy", "with_future", "kept", "asks"),
    [
        ("next_use", True, ["A.mds", "C.mds", "D.mds"], True),  # B is never read again
        ("lru", True, ["B.mds", "C.mds", "D.mds"], False),  # A is the oldest
        ("next_use", False, ["B.mds", "C.mds", "D.mds"], False),  # no future: oldest first
    ],
)
def test_the_victim_is_the_furthest_next_use_else_the_least_recent(
    tmp_path: object, policy: str, with_future: bool, kept: list[str], asks: bool
) -> None:
    root = str(tmp_path)
    space, asked = _cache(root, policy, with_future)
    assert _reserve_one_shard(root, space) == kept
    assert space.evictions == 1
    assert space.usage() == 3 * SIZE
    assert asked == ([3] if asks else [])


def test_next_use_orders_several_victims_by_distance(tmp_path: object) -> None:
    """Room for two shards: the never-read B, then C (tick 10) before A (tick 5)."""
    root = str(tmp_path)
    space, _ = _cache(root, "next_use", True)
    new = os.path.join(root, "D.mds")

    def materialize() -> None:
        with open(new, "wb") as f:
            f.write(b"y" * 2 * SIZE)

    assert asyncio.run(space.reserve(2 * SIZE, materialize, block=True))
    assert sorted(n for n in os.listdir(root) if n.endswith(".mds")) == ["A.mds", "D.mds"]
    assert space.evictions == 2
