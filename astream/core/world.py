"""The shape of a training job: nodes x ranks per node x DataLoader workers per rank.

Theory of operation
-------------------
A :class:`World` is three explicit positive integers; nothing here reads environment variables
or asks torch (that detection lives in the torch layer). The sample order itself never depends
on the World: the World only decides which *slice* of the world-independent global sequence a
given (node, rank, worker) yields (see :mod:`astream.core.order`).

Global ranks are node-major: ``global_rank = node * ranks_per_node + local_rank``, the torchrun
convention.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from astream.errors import ConfigError

__all__ = ["World", "check_positive_int"]


def check_positive_int(name: str, value: object, *, minimum: int = 1) -> int:
    """``value`` as an ``int`` if it is an integer (not a bool) >= ``minimum``; else ConfigError.

    numpy integers are accepted (shard counts often are), floats and strings are not.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ConfigError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


@dataclass(frozen=True)
class World:
    """Explicit job shape. All three numbers must be positive ints."""

    num_nodes: int = 1
    ranks_per_node: int = 1
    workers_per_rank: int = 1

    def __post_init__(self) -> None:
        check_positive_int("num_nodes", self.num_nodes)
        check_positive_int("ranks_per_node", self.ranks_per_node)
        check_positive_int("workers_per_rank", self.workers_per_rank)

    @property
    def num_ranks(self) -> int:
        """Total number of ranks (devices) in the job."""
        return self.num_nodes * self.ranks_per_node

    @property
    def num_workers(self) -> int:
        """Total number of DataLoader workers in the job."""
        return self.num_ranks * self.workers_per_rank

    def global_rank(self, node: int, local_rank: int) -> int:
        """The node-major global rank of ``local_rank`` on ``node``."""
        check_positive_int("node", node, minimum=0)
        check_positive_int("local_rank", local_rank, minimum=0)
        if node >= self.num_nodes:
            raise ConfigError(f"node must be < num_nodes={self.num_nodes}, got {node}")
        if local_rank >= self.ranks_per_node:
            raise ConfigError(
                f"local_rank must be < ranks_per_node={self.ranks_per_node}, got {local_rank}"
            )
        return node * self.ranks_per_node + local_rank

    def node_of(self, global_rank: int) -> int:
        """The node that holds ``global_rank``."""
        self.check_rank(global_rank)
        return global_rank // self.ranks_per_node

    def check_rank(self, global_rank: int) -> int:
        """Validate a global rank against this World."""
        check_positive_int("global_rank", global_rank, minimum=0)
        if global_rank >= self.num_ranks:
            raise ConfigError(
                f"global_rank must be < num_ranks={self.num_ranks}, got {global_rank}"
            )
        return global_rank

    def check_worker(self, worker: int) -> int:
        """Validate a DataLoader worker index against this World."""
        check_positive_int("worker", worker, minimum=0)
        if worker >= self.workers_per_rank:
            raise ConfigError(
                f"worker must be < workers_per_rank={self.workers_per_rank}, got {worker}"
            )
        return worker
