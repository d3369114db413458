"""Where one iteration is in its node's time, for its process's ``next_use`` evictions.

Under a cache limit with ``cache_policy="next_use"`` an iteration's evictions follow the node's
future (:class:`~astream.core.eviction.NodeFuture`): the tracker ticks its consumer's clock at
each batch and each shard it opens, publishes it to the node's other ranks (``clocks.py``), and
answers the cache's question "when is each of these files used next".
"""

from __future__ import annotations

from typing import Any, NamedTuple

from astream.core.eviction import ConsumerClock
from astream.runtime.cache import CacheSpace
from astream.runtime.clocks import NodeClocks
from astream.runtime.prefetch import Lookahead

__all__ = ["Follow", "Tracker"]


class Follow(NamedTuple):
    """Where the next iteration is in its node's time (set by ``Engine.follow``)."""

    clock: ConsumerClock
    shape: tuple[int, int, int, int]  # (nodes, ranks per node, workers per rank, this node)
    epoch: int
    worker: int


class Tracker:
    """Where one iteration is in its node's time, for its process's evictions."""

    def __init__(
        self,
        clock: ConsumerClock,
        la: Lookahead,
        index: dict[str, int],
        space: CacheSpace,
        clocks: NodeClocks | None,
    ) -> None:
        self.clock = clock
        self.la = la
        self.index = index
        self.space = space
        self.clocks = clocks
        self.now = clock.tick(0)

    @classmethod
    def start(
        cls, follow: Follow, la: Lookahead, index: dict[str, int], space: CacheSpace
    ) -> Tracker:
        """The tracker of an iteration placed by ``follow``, now the cache's ``future``."""
        clock, shape, epoch, worker = follow
        try:
            clocks: NodeClocks | None = NodeClocks(
                space.roots[0], shape, epoch, clock.local, worker
            )
        except OSError:  # no shared clock (read-only .astream?): assume ranks in lockstep
            clocks = None
        tracker = cls(clock, la, index, space, clocks)
        space.future = tracker.next_use
        return tracker

    def batch(self) -> None:
        """The consumer starts its next batch."""
        self.now = self.clock.tick(max(0, self.la.batches_taken - 1))
        if self.clocks is not None:
            self.clocks.publish(self.now)

    def reading(self, s: int) -> None:
        """The consumer is about to read shard ``s`` of its current batch."""
        self.now = self.clock.tick(max(0, self.la.batches_taken - 1), self.la.offset_of(s))
        if self.clocks is not None:
            self.clocks.publish(self.now)

    def next_use(self, files: list[Any]) -> list[int]:
        if self.clocks is not None:
            nows = self.clocks.nows()
        else:  # ranks in lockstep
            nows = [self.now] * self.clock.future.world.ranks_per_node
        nows[self.clock.local] = self.now
        shards = [self.index.get(sf.raw_path, -1) for sf in files]
        out: list[int] = self.clock.future.next_use(shards, nows).tolist()
        return out

    def stop(self) -> None:
        if self.space.future == self.next_use:
            self.space.future = None
        if self.clocks is not None:
            self.clocks.close()
            self.clocks = None
