"""Shard basenames from untrusted index files, made safe to join under a dataset root.

An index.json names its shard files. A hostile or corrupt index could name ``../../etc/x`` or
``/abs/path`` and make a reader (or a cache) touch files outside the dataset directory. Every
basename goes through :func:`safe_relpath` before it is joined to a directory.
"""

from __future__ import annotations

from astream.errors import FormatError

__all__ = ["safe_relpath"]


def safe_relpath(basename: str, source: str) -> str:
    """Return ``basename`` as a normalized relative posix path, or raise FormatError.

    Rejected: non-strings, empty names, NUL bytes, backslashes, absolute paths (``/x``, ``C:``),
    ``..`` or ``.`` components and empty components (``a//b``, trailing ``/``).
    ``source`` names the file the basename came from, for the error message.
    """
    if not isinstance(basename, str):
        raise FormatError(f"basename must be a string, got {type(basename).__name__}", source)
    if not basename:
        raise FormatError("basename is empty", source)
    if "\x00" in basename:
        raise FormatError(f"basename {basename!r} contains a NUL byte", source)
    if "\\" in basename:
        raise FormatError(f"basename {basename!r} contains a backslash", source)
    if basename.startswith("/") or (len(basename) >= 2 and basename[1] == ":"):
        raise FormatError(f"basename {basename!r} is an absolute path", source)
    parts = basename.split("/")
    for part in parts:
        if part in ("", ".", ".."):
            raise FormatError(
                f"basename {basename!r} escapes or has an empty/dot path component", source
            )
    return "/".join(parts)
