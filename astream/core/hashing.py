"""Hash algorithms for shard files: hashlib's named constructors plus every xxhash algorithm.

The accepted set matches the reference writer: every ``hashlib`` algorithm that is a module
attribute (``md5``, ``sha1``, ``sha256``, ``blake2b``, ``sha3_256`` ...) except the
variable-length ``shake_*``, and ``xxh32 xxh64 xxh128 xxh3_64 xxh3_128``. A digest is
``hexdigest()`` of the whole file, lowercase. xxhash is imported only when an xxh algorithm is used.
"""

from __future__ import annotations

import hashlib
from typing import Any, Protocol

from astream.errors import ConfigError

__all__ = ["Hasher", "hash_names", "hexdigest", "new_hasher", "validate_hash"]

_XXH = ("xxh32", "xxh64", "xxh128", "xxh3_64", "xxh3_128")
_HASHLIB = tuple(
    sorted(
        a
        for a in hashlib.algorithms_available
        if hasattr(hashlib, a) and not a.startswith("shake_")
    )
)


class Hasher(Protocol):
    def update(self, data: Any, /) -> None: ...

    def hexdigest(self) -> str: ...


def hash_names() -> tuple[str, ...]:
    """Every accepted algorithm name, sorted."""
    return tuple(sorted(_HASHLIB + _XXH))


def validate_hash(algo: str) -> str:
    """Return ``algo`` if accepted, else raise ConfigError naming it."""
    if not isinstance(algo, str) or (algo not in _HASHLIB and algo not in _XXH):
        raise ConfigError(
            f"hashes: unsupported hash algorithm {algo!r}; choose from {', '.join(hash_names())}"
        )
    return algo


def new_hasher(algo: str) -> Hasher:
    """An incremental hasher (``update`` / ``hexdigest``) for ``algo``."""
    validate_hash(algo)
    if algo in _XXH:
        import xxhash

        ctor: Any = getattr(xxhash, algo)
        return ctor()  # type: ignore[no-any-return]
    return getattr(hashlib, algo)()  # type: ignore[no-any-return]


def hexdigest(algo: str, data: bytes | bytearray | memoryview) -> str:
    """Lowercase hex digest of ``data`` under ``algo``."""
    h = new_hasher(algo)
    h.update(data)
    return h.hexdigest()
