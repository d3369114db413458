"""Where a writer's output goes: the ``out`` argument and atomic file writes.

Shared by the writers (``mds``, ``xsv``, ``parts``, ``aio``) and ``merge_index``. It imports
nothing from the rest of writer/, so ``merge`` does not depend on ``mds`` and the writer
package has no import circle (``mds -> remote -> merge -> mds`` before this module existed).
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from astream.errors import ConfigError

__all__ = ["split_out", "write_atomic"]


def split_out(out: Any) -> tuple[str | None, str | None]:
    """``out`` -> (local dir or None, remote URL or None)."""
    if isinstance(out, tuple):
        if len(out) != 2 or not all(isinstance(x, (str, os.PathLike)) for x in out):
            raise ConfigError(f"out: a tuple must be (local_dir, remote_url), got {out!r}")
        return os.path.expanduser(os.fspath(out[0])), os.fspath(out[1])
    if not isinstance(out, (str, os.PathLike)):
        raise ConfigError(f"out must be a path, a URL or a (local, remote) tuple, got {out!r}")
    text = os.fspath(out)
    if text.startswith("file://"):
        return text[len("file://") :], None
    if "://" in text:
        return None, text
    if not text:
        raise ConfigError("out must not be empty")
    return os.path.expanduser(text), None


def write_atomic(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temp file in the same directory and a rename."""
    dirname, base = os.path.split(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{base}.", suffix=".tmp", dir=dirname or ".")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
