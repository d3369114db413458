"""The reference's ``streaming.base.hashing`` functions, on astream's hash table
(``astream.core.hashing``): the same algorithm names a writer's ``hashes=`` accepts, the same
hex digests. An unknown algorithm is a :class:`~astream.errors.ConfigError`, which is the
``ValueError`` the reference raises."""

from __future__ import annotations

from astream.core import hashing as _hashing

__all__ = ["get_hash", "get_hashes", "is_hash"]


def get_hashes() -> set[str]:
    """Every algorithm name a writer's ``hashes=`` and ``get_hash`` accept."""
    return set(_hashing.hash_names())


def is_hash(algo: str) -> bool:
    """Whether ``algo`` is one of :func:`get_hashes`."""
    return isinstance(algo, str) and algo in _hashing.hash_names()


def get_hash(algo: str, data: bytes) -> str:
    """The lowercase hex digest of ``data`` under ``algo``."""
    return _hashing.hexdigest(algo, data)
