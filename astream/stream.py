"""``Stream`` and ``streams_registry``, public here: one dataset (a remote and/or local
directory) inside a mix, its weight and its download settings.

The code is :mod:`astream.core.stream`: a stream is configuration only (no I/O), and the
runtime's dataset configuration, which builds registered ``Stream`` classes by name, may import
the core but not this layer. This module is the import path users and the docs name.
"""

from __future__ import annotations

from astream.core.stream import (
    FORMATS,
    MAX_CHOOSE,
    MAX_DOWNLOAD_RETRY,
    MAX_DOWNLOAD_TIMEOUT,
    MAX_PROPORTION,
    MAX_REPEAT,
    Stream,
    StreamRegistry,
    streams_registry,
)

__all__ = [
    "FORMATS",
    "MAX_CHOOSE",
    "MAX_DOWNLOAD_RETRY",
    "MAX_DOWNLOAD_TIMEOUT",
    "MAX_PROPORTION",
    "MAX_REPEAT",
    "Stream",
    "StreamRegistry",
    "streams_registry",
]
