"""The reference's MDS encoding functions, on astream's coders (``astream.core.encodings``).

Encoded bytes are the reference's for every encoding (golden-tested). An unknown encoding is a
:class:`~astream.errors.ConfigError`, which is the ``ValueError`` the reference raises.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from astream.core import encodings as _enc
from astream.errors import ConfigError

__all__ = [
    "Encoding",
    "get_mds_encoded_size",
    "get_mds_encodings",
    "is_mds_encoding",
    "is_mds_encoding_safe",
    "mds_decode",
    "mds_encode",
]


class Encoding(ABC):
    """A coder between values of one type and bytes. ``size`` is the fixed byte size of every
    encoded value, or ``None`` when it varies."""

    size: int | None = None

    @abstractmethod
    def encode(self, obj: Any) -> bytes:
        """The bytes of ``obj``."""

    @abstractmethod
    def decode(self, data: bytes) -> Any:
        """The value of ``data``."""


def get_mds_encodings() -> set[str]:
    """The base names of every encoding (``ndarray`` stands for all its ``ndarray:...``)."""
    return set(_enc.ENCODING_NAMES)


def is_mds_encoding(encoding: str) -> bool:
    """Whether ``encoding`` (a base name or ``ndarray:dtype:shape``) is one."""
    return _enc.is_encoding(encoding)


def is_mds_encoding_safe(encoding: str) -> bool:
    """False for the encodings that can run code when decoded (``pkl``)."""
    return encoding not in _enc.UNSAFE_ENCODINGS


def _known(encoding: str) -> str:
    if not _enc.is_encoding(encoding):
        raise ConfigError(f"encoding: unsupported encoding {encoding!r}")
    return encoding


def mds_encode(encoding: str, obj: Any) -> bytes:
    """The bytes of ``obj`` in ``encoding``; ``bytes`` pass through unchanged."""
    if isinstance(obj, bytes):
        return obj
    return _enc.encode(_known(encoding), obj)


def mds_decode(encoding: str, data: bytes) -> Any:
    """The value of ``data`` in ``encoding``."""
    return _enc.decode(_known(encoding), data)


def get_mds_encoded_size(encoding: str) -> int | None:
    """The fixed byte size of every value of ``encoding``, or ``None`` if it varies."""
    return _enc.encoded_size(_known(encoding))
