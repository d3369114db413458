"""The error for a full or unwritable cache directory, whoever was writing into it.

Downloads (:mod:`astream.runtime.fetch`) and the cache directory's own small files
(:mod:`astream.runtime.binding`) turn the same ``OSError`` numbers into the same
:class:`~astream.errors.CacheError`: it names the directory, the file, the bytes needed and
``cache_limit``, and says what to change. The module imports nothing of the runtime, so the
cache, the binding and the fetcher all stand above it.
"""

from __future__ import annotations

import errno
import os

from astream.errors import AstreamError, CacheError

__all__ = ["disk_error"]

_NO_SPACE = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
_NO_WRITE = {errno.EACCES, errno.EPERM, errno.EROFS}


def disk_error(
    exc: OSError, path: str, *, root: str, need: int | None, limit: int | None
) -> CacheError | None:
    """The :class:`CacheError` for a full or unwritable cache directory (None: another error).

    ``path`` is the file being written, ``root`` the cache directory, ``need`` the bytes the
    operation needed there."""
    if isinstance(exc, AstreamError) or exc.errno not in _NO_SPACE | _NO_WRITE:
        return None
    needed = "" if need is None else f" ({need} bytes needed"
    if needed:
        needed += f", cache_limit={limit})" if limit is not None else ", no cache_limit)"
    if exc.errno in _NO_SPACE:
        what = os.strerror(exc.errno).lower()
        hint = (
            "free space there, point `local` at a bigger disk, or set cache_limit below the "
            "free space"
        )
    else:
        what = "cannot write: " + os.strerror(exc.errno).lower()
        hint = "make it writable by this user, or point `local` at a writable directory"
    return CacheError(f"cache directory {root}: {what} writing {path}{needed}; {hint}")
