"""merge_index: join the index.json files of sub-datasets into one index at their parent.

Theory of operation. Each sub-dataset ``root/part/`` was written by its own writer (typically
one per process). Merging reads every ``part/index.json``, validates it, prefixes each shard
file basename with the part's directory name (``part/shard.00000.mds``), concatenates the
shards in the given order and writes ``root/index.json`` in the reference ``merge_index``
layout (``{"version": 2, "shards": [...]}``), atomically.

Call forms, as in the reference:
- ``merge_index(index_file_urls, out, keep_local=True, download_timeout=60)``: explicit list of
  index.json paths (or ``(local, remote)`` pairs, of which the local one is used when present);
- ``merge_index(out, keep_local=True, download_timeout=60)``: every ``*/index.json`` directly
  under ``out``, in the reference's (sorted path) order.

Where sub-indexes come from and where the result goes is behind :class:`IndexLocator`; the
local locator lives here. The first remote URL imports ``writer/remote.py``'s
``RemoteIndexLocator`` (storage layer, imported lazily so a local merge never loads it);
:func:`register_remote_locator` replaces it. ``remote`` never imports this module back.

Publishing, when ``out`` already holds an ``index.json``. The reference replaces it (its uploader
runs with ``exist_ok=True``), and so does ``merge_index``: merging again after adding a part
is the normal use. The replacement is never torn and never interleaved:

- local: the merged index is written to a temporary name and renamed into place (one
  ``rename``): a reader sees the old index or the new one, whole. Two local merges racing on
  one directory leave the index of whichever renamed last, whole.
- object stores (S3, GCS, Azure): the locator notes the version of ``out/index.json`` *before*
  the sub-indexes are read (none: absent) and publishes with a write conditioned on it
  (``If-None-Match: *`` / ``If-Match: <etag>``; GCS ``ifGenerationMatch=0`` /
  ``=<generation>``), as the writers publish (``writer/publish.py``). An object PUT is atomic,
  so no partial index is ever visible; and if anything published there meanwhile (another
  merge, a writer claiming the prefix with ``exist_ok=True``) this merge fails with
  :class:`~astream.errors.ObjectChangedError` naming ``out``, and what the other one published
  stands. ``hf://`` is published as one commit (the Hub takes no conditional single-file
  write); a store that cannot condition a replacement (DBFS, SFTP) creates the index only if
  there is none, and refuses to replace one (a ``StorageError`` naming it): remove the old
  index first.

Differences from the reference: only ``index.json`` files one directory level down are merged
in the root form (the reference takes any ``.json`` at any depth, and deeper ones get a wrong
prefix); ``keep_local=False`` never deletes a directory (the reference removes the whole
local dataset it just indexed): with a ``(local, remote)`` out it only leaves no merged copy
in ``local``, and a purely local out is the dataset itself, kept.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Protocol

from astream.core.index import INDEX_BASENAME, FileInfo, Index, ShardEntry, dump_index, parse_index
from astream.core.paths import safe_relpath
from astream.errors import ConfigError, FormatError
from astream.writer.output import split_out, write_atomic

__all__ = ["IndexLocator", "merge_index", "merge_indexes", "register_remote_locator"]


class IndexLocator(Protocol):
    """Reads sub-indexes and writes the merged index for one kind of location."""

    def list_sub_indexes(self, root: str) -> list[str]: ...

    def read(self, url: str, timeout: float) -> bytes:
        """The bytes of index ``url``; ``timeout``: seconds each request may take."""
        ...

    def version(self, out: str) -> str | None:
        """The identity of ``out``'s index.json now (None: there is none), which ``write``
        is conditioned on."""
        ...

    def write(self, out: str, data: bytes, keep_local: bool, expect: str | None) -> None:
        """Publish ``data`` as ``out``'s index.json, whole, only while that index is still
        the version ``expect`` (absent when None); else ObjectChangedError naming ``out``."""
        ...


class LocalLocator:
    def list_sub_indexes(self, root: str) -> list[str]:
        if not os.path.isdir(root):
            raise ConfigError(f"out: {root!r} is not a directory")
        found = []
        for name in os.listdir(root):
            path = os.path.join(root, name, INDEX_BASENAME)
            if os.path.isfile(path):
                found.append((f"{name}/{INDEX_BASENAME}", path))
        return [path for _, path in sorted(found)]

    def read(self, url: str, timeout: float) -> bytes:
        try:
            with open(url, "rb") as f:
                return f.read()
        except FileNotFoundError:
            raise ConfigError(f"index_file_urls: {url!r} does not exist") from None

    def version(self, out: str) -> str | None:
        return None  # a local index is replaced by one rename: there is no torn state to guard

    def write(self, out: str, data: bytes, keep_local: bool, expect: str | None) -> None:
        os.makedirs(out, exist_ok=True)
        write_atomic(os.path.join(out, INDEX_BASENAME), data)


_LOCAL = LocalLocator()
_remote: IndexLocator | None = None


def register_remote_locator(locator: IndexLocator | None) -> None:
    """Let the storage layer handle remote URLs in merge_index."""
    global _remote
    _remote = locator


def _locator(url: str) -> IndexLocator:
    global _remote
    if "://" not in url or url.startswith("file://"):
        return _LOCAL
    if _remote is None:
        try:
            from astream.writer.remote import RemoteIndexLocator
        except ImportError:
            raise ConfigError(
                f"merge_index: remote location {url!r} needs the storage layer"
            ) from None
        _remote = RemoteIndexLocator()
    return _remote


def _prefixed(info: FileInfo | None, prefix: str, source: str) -> FileInfo | None:
    if info is None:
        return None
    name = safe_relpath(f"{prefix}/{info.basename}" if prefix else info.basename, source)
    return FileInfo(name, info.bytes, info.hashes)


def merge_indexes(parts: Sequence[tuple[str, bytes]]) -> Index:
    """Merge (index url, index bytes) pairs: shards concatenated, basenames prefixed."""
    shards: list[ShardEntry] = []
    for url, data in parts:
        index = parse_index(data, url)
        prefix = os.path.basename(os.path.dirname(url.rstrip("/")))
        for s in index.shards:
            raw = _prefixed(s.raw_data, prefix, url)
            assert raw is not None
            shards.append(
                ShardEntry(
                    **{
                        **s.__dict__,
                        "raw_data": raw,
                        "zip_data": _prefixed(s.zip_data, prefix, url),
                        "raw_meta": _prefixed(s.raw_meta, prefix, url),
                        "zip_meta": _prefixed(s.zip_meta, prefix, url),
                    }
                )
            )
    return Index(shards)


def _pick(url: Any) -> str:
    if isinstance(url, tuple):
        if len(url) != 2:
            raise ConfigError(f"index_file_urls: bad entry {url!r}")
        local, remote = (str(u).rstrip("/").strip() for u in url)
        return local if os.path.exists(local) else remote
    if not isinstance(url, (str, os.PathLike)):
        raise ConfigError(f"index_file_urls: bad entry {url!r}")
    return os.fspath(url).rstrip("/").strip()


def _from_list(urls: Sequence[Any], out: Any, keep_local: bool, timeout: float) -> None:
    if not urls or not out:
        raise ConfigError("merge_index needs both index_file_urls and out")
    seen: list[str] = []
    for u in urls:
        path = _pick(u)
        if path.startswith("file://"):
            path = path[len("file://") :]
        if path not in seen:
            seen.append(path)
    local, remote = split_out(out)
    target = remote if remote is not None else local
    assert target is not None
    publisher = _locator(target)
    was = publisher.version(target)  # before reading: a publication meanwhile is a conflict
    parts = [(u, _locator(u).read(u, timeout)) for u in seen]
    data = dump_index(merge_indexes(parts), merge_layout=True)
    publisher.write(target, data, keep_local, was)
    if local is not None and remote is not None and keep_local:
        _LOCAL.write(local, data, True, None)


def _from_root(out: Any, keep_local: bool, timeout: float) -> None:
    if not out:
        raise ConfigError("merge_index needs out")
    local, remote = split_out(out)
    if local is not None and os.path.isdir(local):
        subs = _LOCAL.list_sub_indexes(local)
    elif remote is not None:
        subs = _locator(remote).list_sub_indexes(remote)
    else:
        raise ConfigError(f"out: {local!r} is not a directory")
    if not subs:
        raise FormatError("no sub-dataset index.json found one level down", str(local or remote))
    _from_list(subs, out, keep_local, timeout)


def _timeout(value: Any) -> float:
    from astream.core.stream import MAX_DOWNLOAD_TIMEOUT

    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not 0 < value <= MAX_DOWNLOAD_TIMEOUT
    ):
        raise ConfigError(
            f"merge_index: download_timeout must be a number of seconds in "
            f"(0, {MAX_DOWNLOAD_TIMEOUT:g}], got {value!r}"
        )
    return float(value)


def merge_index(*args: Any, **kwargs: Any) -> None:
    """Merge sub-dataset indexes; see the module docstring for the two call forms.
    ``download_timeout`` bounds each request reading a remote sub-index (a local one is read
    from disk)."""
    listed = (bool(args) and isinstance(args[0], list)) or "index_file_urls" in kwargs
    names = ["out", "keep_local", "download_timeout"]
    if listed:
        names.insert(0, "index_file_urls")
    if len(args) > len(names):
        raise ConfigError(f"merge_index: at most {len(names)} positional arguments, got {args!r}")
    given = dict(zip(names, args))
    for key, value in kwargs.items():
        if key not in names or key in given:
            why = "given twice" if key in given else "is not an argument of this call form"
            raise ConfigError(f"merge_index: {key!r} {why}")
        given[key] = value
    keep_local = bool(given.get("keep_local", True))
    timeout = _timeout(given.get("download_timeout", 60))
    if listed:
        _from_list(given["index_file_urls"], given.get("out"), keep_local, timeout)
    else:
        _from_root(given.get("out"), keep_local, timeout)
