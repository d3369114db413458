"""The checkpoint state of a loader: a small dict of plain values.

Theory of operation
-------------------
Because the global order is a pure function of (dataset, seed, epoch, num_canonical_nodes,
shuffle settings) and not of the World, resuming needs only *where* in which epoch we were:
``epoch`` and ``sample_in_epoch`` (positions of the global sequence consumed by all ranks
together), plus the settings that fix the order (``shuffle_seed``, ``num_canonical_nodes``).
The initial world is recorded for information and for reference compatibility; resuming on a
different World yields exactly the suffix of the same global sequence.

Keys shared with the reference's ``state_dict`` keep its names and meaning: ``epoch``,
``sample_in_epoch``, ``num_canonical_nodes``, ``shuffle_seed``, ``initial_physical_nodes``.
astream adds ``initial_ranks_per_node``, ``initial_workers_per_rank`` and ``astream_version``.
:meth:`LoaderState.from_dict` accepts a reference dict (the astream keys absent).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from astream.errors import ConfigError

__all__ = ["STATE_VERSION", "LoaderState"]

STATE_VERSION: Final = 1
_REQUIRED = ("epoch", "sample_in_epoch", "num_canonical_nodes", "shuffle_seed")


def _int(d: dict[str, Any], key: str, minimum: int, default: int | None = None) -> int:
    v = d.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int):
        raise ConfigError(f"state[{key!r}]: must be an int, got {type(v).__name__} {v!r}")
    if v < minimum:
        raise ConfigError(f"state[{key!r}]: must be >= {minimum}, got {v}")
    return v


@dataclass(frozen=True)
class LoaderState:
    """Where a loader is: enough to resume the same order on any World."""

    epoch: int
    sample_in_epoch: int
    shuffle_seed: int
    num_canonical_nodes: int
    initial_physical_nodes: int | None = None
    initial_ranks_per_node: int | None = None
    initial_workers_per_rank: int | None = None
    version: int = STATE_VERSION

    def __post_init__(self) -> None:
        LoaderState.from_dict(self.to_dict())  # validates every field with its key in the message

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of ints (and None) that pickles and serialises to JSON as is."""
        return {
            "epoch": self.epoch,
            "sample_in_epoch": self.sample_in_epoch,
            "shuffle_seed": self.shuffle_seed,
            "num_canonical_nodes": self.num_canonical_nodes,
            "initial_physical_nodes": self.initial_physical_nodes,
            "initial_ranks_per_node": self.initial_ranks_per_node,
            "initial_workers_per_rank": self.initial_workers_per_rank,
            "astream_version": self.version,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LoaderState:
        """Parse a dict from :meth:`to_dict` or from the reference's ``state_dict``."""
        if not isinstance(d, dict):
            raise ConfigError(f"state: must be a dict, got {type(d).__name__}")
        for key in _REQUIRED:
            if key not in d:
                raise ConfigError(f"state: missing key {key!r}")
        version = _int(d, "astream_version", 1, STATE_VERSION)
        if version > STATE_VERSION:
            raise ConfigError(
                f"state['astream_version']: {version} is newer than this astream ({STATE_VERSION})"
            )
        optional = {}
        for key in ("initial_physical_nodes", "initial_ranks_per_node", "initial_workers_per_rank"):
            optional[key] = None if d.get(key) is None else _int(d, key, 1)
        state = object.__new__(cls)
        fields = {
            "epoch": _int(d, "epoch", 0),
            "sample_in_epoch": _int(d, "sample_in_epoch", 0),
            "shuffle_seed": _int(d, "shuffle_seed", 0),
            "num_canonical_nodes": _int(d, "num_canonical_nodes", 1),
            **optional,
            "version": version,
        }
        for key, value in fields.items():
            object.__setattr__(state, key, value)
        return state
