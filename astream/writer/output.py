"""Where a writer's output goes: the ``out`` argument and atomic file writes.

Shared by the writers (``mds``, ``xsv``, ``parts``, ``aio``) and ``merge_index``. It imports
nothing from the rest of writer/, so ``merge`` does not depend on ``mds`` and the writer
package has no import circle (``mds -> remote -> merge -> mds`` before this module existed).

Files are written to a hidden temporary name in their directory and renamed into place, with
the mode the process umask gives (0644 under umask 022; ``tempfile.mkstemp`` would make them
0600, unreadable by the rest of a team). A full or over-quota disk, or a place this user cannot
write, is an :class:`~astream.errors.AstreamError` naming the path and the bytes the write
needed (see :func:`~astream.storage.common.disk_error`), and the temporary file is removed: no
partial file ever has its final name. Every byte goes through :func:`_write_all`, the one place
a test can make a write fail.
"""

from __future__ import annotations

import os
from typing import Any

from astream.errors import ConfigError
from astream.storage.common import disk_error, new_temp_file

__all__ = ["make_dirs", "split_out", "write_atomic"]


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
    if "://" in text or text[:6].lower() == "dbfs:/":  # Databricks: dbfs:/Volumes/..., one slash
        return None, text
    if not text:
        raise ConfigError("out must not be empty")
    return os.path.expanduser(text), None


def _write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` (the fault-injection seam of every writer file)."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def write_atomic(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temp file in the same directory and a rename."""
    dirname, base = os.path.split(path)
    tmp = None
    try:
        fd, tmp = new_temp_file(dirname or ".", f".{base}.", ".tmp")
        try:
            _write_all(fd, data)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
        if isinstance(exc, OSError):
            err = disk_error(exc, path, len(data))
            if err is not None:
                raise err from exc
        raise


def make_dirs(path: str) -> None:
    """``os.makedirs(path, exist_ok=True)`` (modes from the umask); a disk that refuses it is
    an error naming the directory."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        err = disk_error(exc, path, None)
        if err is not None:
            raise err from exc
        raise
