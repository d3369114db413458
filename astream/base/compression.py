"""The reference's ``streaming.base.compression`` names, on astream's codecs
(``astream.core.compression``): the same algorithm names (``zstd``, ``zstd:7``, ``br``, ``gz``,
``bz2``, ``snappy``), the same compressed bytes for the same input.

An unknown algorithm is a :class:`~astream.errors.ConfigError` (the reference's ``ValueError``);
data that is not bytes-like is a ``TypeError``, checked before any codec runs, so no input is
ever turned into bytes by accident (``compress("zstd", 100)`` refuses instead of compressing
100 zero bytes; ``Snappy().compress("text")`` refuses where the reference encodes the text).
``None`` as the algorithm returns the data untouched, as the reference does.
"""

from __future__ import annotations

from typing import Any, ClassVar

from astream.core import compression as _codecs
from astream.errors import ConfigError

__all__ = [
    "Brotli",
    "Bzip2",
    "Compression",
    "Gzip",
    "Snappy",
    "Zstandard",
    "compress",
    "decompress",
    "get_compression_extension",
    "get_compressions",
    "is_compression",
]


def _bytes_like(data: Any) -> bytes | memoryview:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"data must be bytes-like, got {type(data).__name__}")
    return bytes(data) if isinstance(data, bytearray) else data


class Compression:
    """One codec at one level. ``extension`` names the compressed file's suffix."""

    extension: ClassVar[str] = ""
    levels: ClassVar[list[int]] = []

    def __init__(self, level: int | None = None) -> None:
        if self.levels and level not in self.levels:
            raise ConfigError(f"{type(self).__name__}: level {level!r} is not one of {self.levels}")
        if not self.levels and level is not None:
            raise ConfigError(f"{type(self).__name__} takes no level, got {level!r}")
        self.level = level
        self._spec = self.extension if level is None else f"{self.extension}:{level}"

    def compress(self, data: bytes) -> bytes:
        """``data`` compressed."""
        return _codecs.compress(self._spec, _bytes_like(data))

    def decompress(self, data: bytes) -> bytes:
        """``data`` decompressed (astream's ``FormatError`` when it is corrupt)."""
        return _codecs.decompress(self._spec, _bytes_like(data))


class Brotli(Compression):
    extension = "br"
    levels: ClassVar[list[int]] = list(range(12))

    def __init__(self, level: int = 11) -> None:
        super().__init__(level)


class Bzip2(Compression):
    extension = "bz2"
    levels: ClassVar[list[int]] = list(range(1, 10))

    def __init__(self, level: int = 9) -> None:
        super().__init__(level)


class Gzip(Compression):
    extension = "gz"
    levels: ClassVar[list[int]] = list(range(10))

    def __init__(self, level: int = 9) -> None:
        super().__init__(level)


class Snappy(Compression):
    extension = "snappy"


class Zstandard(Compression):
    extension = "zstd"
    levels: ClassVar[list[int]] = list(range(1, 23))

    def __init__(self, level: int = 3) -> None:
        super().__init__(level)


def get_compressions() -> set[str]:
    """Every algorithm name: each codec alone and at each of its levels."""
    return set(_codecs.compression_names())


def is_compression(algo: str | None) -> bool:
    """Whether ``algo`` is one of :func:`get_compressions`."""
    return isinstance(algo, str) and algo in _codecs.compression_names()


def _known(algo: str) -> str:
    if not is_compression(algo):
        raise ConfigError(f"compression: {algo!r} is not a supported compression algorithm")
    return algo


def get_compression_extension(algo: str) -> str:
    """The suffix of files compressed with ``algo`` (``zstd:7`` -> ``zstd``)."""
    return _codecs.extension(_known(algo))


def compress(algo: str | None, data: bytes) -> bytes:
    """``data`` compressed with ``algo``; ``None`` returns ``data`` itself, whatever it is."""
    if algo is None:
        return data
    return _codecs.compress(_known(algo), _bytes_like(data))


def decompress(algo: str | None, data: bytes) -> bytes:
    """``data`` decompressed with ``algo``; ``None`` returns ``data`` itself, whatever it is."""
    if algo is None:
        return data
    return _codecs.decompress(_known(algo), _bytes_like(data))
