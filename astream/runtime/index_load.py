"""Loading a stream's index: revalidated against the remote, ``local`` bound to it.

Theory of operation
-------------------
Index loading (:func:`load_index`) happens once per process that builds a dataset. With a remote
the remote ``index.json`` is always fetched (it is small) and compared with the local copy, and
``local`` is bound to the remote (:mod:`astream.runtime.binding`):

- a ``local`` bound to *another* remote is a :class:`ConfigError` (never the other's bytes);
- an unbound ``local`` that already holds a different dataset (an ``MDSWriter`` output, shard
  files without an index) is refused; one whose index equals the remote's is adopted as is;
- when the remote's index changed, every cached shard whose index entry changed, or carries no
  digest that pins its bytes, is deleted, the new index replaces the local one atomically and
  the binding follows it;
- when the remote index cannot be read at all but ``local`` holds a complete copy of the dataset
  it is bound to, that copy is used, with one warning naming the reason;
- when the remote index cannot be read (an absent remote, most often) and ``local`` is bound to
  no remote but holds a complete dataset (an ``MDSWriter`` output: its ``index.json`` and every
  file it names at full size, raw or compressed), that dataset is read in place, as the
  reference reads a local index without looking at the remote, with one warning. It stays
  unbound, and the catalog treats it as local-only data (no remote to fetch from, never
  evicted). A ``local`` that holds an index but not every file of it is then one error of the
  store's type naming the remote, the reason and the local directory with what it lacks.

A large index (>= ``COMPACT_MIN`` bytes; 100k shards are ~33 MB) is also kept parsed, as a
compact copy (:meth:`ShardTable.to_compact`: mapped int columns, no per-shard objects) under
``.astream/``, stamped with the index's digest and with the ETag and size the remote reported
in a HEAD made *before* the GET of those bytes. The next load makes that HEAD first: same ETag
and size -> the compact copy is used, with no GET and no parse; anything else -> the index is
fetched and compared as above (and when its bytes equal the cached ones, the compact copy still
replaces the parse). An ETag taken before the GET can only be older than the bytes, so a change
between the two makes the next HEAD differ: a stale copy is never served. A local remote
(``file://``, a path) is always read: its bytes cost what a HEAD does.
"""

from __future__ import annotations

import json
import os
import warnings
import weakref
from typing import Any

import msgspec

from astream.core.index import Index, ShardEntry, parse_index, parse_index_validating
from astream.core.shard_table import compact_meta, from_compact
from astream.errors import (
    ConfigError,
    FormatError,
    MissingIndexError,
    StorageError,
)
from astream.runtime.binding import (
    Binding,
    index_digest,
    is_entry,
    mark_entry,
    meta_dir,
    new_dirs,
    read_binding,
    write_atomic,
    write_binding,
)
from astream.storage.base import ObjectInfo, ObjectStore

__all__ = ["COMPACT", "COMPACT_MIN", "INDEX", "load_index", "load_local_index", "local_copy"]

INDEX = "index.json"
COMPACT = "index.compact"  # under .astream/: the parsed copy of a large index (see load_index)
COMPACT_MIN = 1 << 20  # index.json bytes from which a compact copy is kept
# indexes read in place from an unbound local copy because the remote's could not be read (see
# load_index): by id, while the Index lives; the Catalog makes their streams local-only
_LOCAL_COPIES: weakref.WeakValueDictionary[int, Index] = weakref.WeakValueDictionary()


def local_copy(index: Index) -> bool:
    """Whether ``index`` was read in place from an unbound local copy because the remote's
    could not be read (:func:`load_index`): its stream is then local-only data."""
    return _LOCAL_COPIES.get(id(index)) is index


def load_local_index(local: str) -> Index:
    """The index of a stream with no remote, read from ``local`` (no I/O to await: the
    blocking constructor reads it in its own thread)."""
    path = os.path.join(local, INDEX)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise MissingIndexError(
            f"No `remote` provided, but local file {path} does not exist: give `remote`, "
            "or point `local` at an MDS dataset"
        ) from None
    return parse_index(data, path)


async def load_index(store: ObjectStore | None, local: str) -> Index:
    """The stream's index, revalidated against the remote when there is one, and ``local``
    bound to that remote (see :mod:`astream.runtime.binding`)."""
    path = os.path.join(local, INDEX)
    if store is None:
        return load_local_index(local)
    remote = store.url
    bound = read_binding(local)
    if bound is not None and bound.remote != remote:
        raise ConfigError(
            f"local={local!r} is the cache of {bound.remote}; it cannot also hold {remote}: "
            "give this dataset its own `local` (or leave local=None: one directory per remote), "
            f"or delete {local} if the cache of {bound.remote} is no longer needed"
        )
    compact = os.path.join(meta_dir(local), COMPACT)
    head: ObjectInfo | None = None
    if bound is not None and _revalidates(store):
        got = await _revalidate(store, local, path, compact, bound)
        if isinstance(got, Index):
            return got
        head = got
    try:
        data = await store.get_range(INDEX)
    except StorageError as exc:
        return _unreadable(remote, exc, local, bound)
    digest = index_digest(data)
    old = _read(path)
    same = old == data
    index = _load_compact(compact, digest) if same and len(data) >= COMPACT_MIN else None
    readable = index is not None  # the compact copy on disk is whole
    if index is None:
        index = parse_index(data, store.url_for(INDEX))
    old_index = None if same else _parse_or_none(old, path)
    if bound is None and old is not None and not same and not _same_table(old_index, index):
        raise ConfigError(
            f"local={local!r} already holds a dataset (its {INDEX} differs from the one of "
            f"{remote}) that no remote is bound to; astream will not overwrite it: give "
            "`local` an empty or new directory"
        )
    if bound is None and old is None:
        _refuse_orphans(local, index)
    for d in new_dirs(local):
        if not is_entry(d):
            mark_entry(d, remote)
    if not same:
        if old is not None or bound is not None:
            # the index changed: drop every shard whose entry changed (all of them when the
            # old index is unreadable or gone: nothing cached is known to match)
            _drop_stale(local, old_index, index)
        # the temporary copy lives under .astream/, which cache accounting never counts
        os.makedirs(os.path.join(local, ".astream"), exist_ok=True)
        write_atomic(
            path, data, local, tmp=os.path.join(local, ".astream", f"{INDEX}.{os.getpid()}")
        )
    if bound is None or bound.digest != digest:
        write_binding(local, Binding(remote, digest))
    _keep_compact(compact, local, index, data, digest, head, readable)
    return index


def _unreadable(remote: str, exc: StorageError, local: str, bound: Binding | None) -> Index:
    """The index to read when the remote's cannot be read (``exc``): the complete copy
    ``local`` holds of the dataset it is bound to, or the complete dataset an unbound ``local``
    holds (an ``MDSWriter`` output, read in place as local-only data); else ``exc`` itself when
    ``local`` holds no index, or an error of its type naming the remote and ``local`` with
    what ``local`` lacks."""
    warm = _warm_copy(local, bound)
    if warm is not None:
        _warn_warm(remote, exc, local, warm)
        return warm
    path = os.path.join(local, INDEX)
    data = _read(path)
    if data is None:
        raise exc
    index = _parse_or_none(data, path)
    why: str | None
    if index is None:
        why = f"its {INDEX} cannot be parsed"
    elif bound is not None and index_digest(data) != bound.digest:
        why = f"its {INDEX} is not the one of {bound.remote} it was bound to"
    else:
        why = _lacking(local, index, raw_only=bound is not None)
    if why is None and index is not None:  # an unbound, complete dataset: read it in place
        warnings.warn(
            f"the index of {remote} cannot be read ({exc}); reading the complete dataset in "
            f"{local} in place ({len(index.shards)} shards, bound to no remote): local-only "
            "data, never evicted",
            stacklevel=3,
        )
        _LOCAL_COPIES[id(index)] = index
        return index
    err = type(exc)(
        f"the index of {remote} cannot be read ({exc}), and local={local!r} holds no complete "
        f"copy to read instead: {why}",
        retryable=exc.retryable,
    )
    err.url = exc.url
    raise err from exc


def _lacking(local: str, index: Index, *, raw_only: bool) -> str | None:
    """What ``local`` lacks of ``index``'s files (the first one missing or of another size:
    each shard's data file and a split shard's meta file, compressed or raw, only raw with
    ``raw_only``), or None when it holds them all."""
    for i, entry in enumerate(index.shards):
        for raw, zipped in ((entry.raw_data, entry.zip_data), (entry.raw_meta, entry.zip_meta)):
            if raw is None:
                continue
            options = [raw] if raw_only or zipped is None else [zipped, raw]
            found = [(info, _size(os.path.join(local, info.basename))) for info in options]
            if any(size == info.bytes for info, size in found):
                continue
            for info, size in found:
                if size is not None:
                    return f"shard {i}: {info.basename} has {size} bytes, not {info.bytes}"
            return f"shard {i}: {options[0].basename} is missing"
    return None


def _size(path: str) -> int | None:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return None


def _warn_warm(remote: str, exc: StorageError, local: str, warm: Index) -> None:
    warnings.warn(
        f"the index of {remote} cannot be read ({exc}); streaming the complete cached copy "
        f"in {local} ({len(warm.shards)} shards, bound to that remote)",
        stacklevel=3,
    )


def _revalidates(store: ObjectStore) -> bool:
    """Whether ``store`` reports an ETag (or generation) that changes with the object: every
    remote backend; a local directory's "etag" is only mtime and size, and reading it is
    as cheap as asking, so a local remote is always read."""
    url = store.url
    return ("://" in url or url[:6].lower() == "dbfs:/") and not url.startswith("file://")


async def _revalidate(
    store: ObjectStore, local: str, path: str, compact: str, bound: Binding
) -> Index | ObjectInfo | None:
    """The cached compact index when the remote's ETag and size are those it was made from
    (a HEAD instead of the whole index); else the HEAD's answer, taken *before* the GET that
    follows, so that the ETag recorded with the bytes of that GET is never newer than them
    (the index replaced in between: the next HEAD differs, and the index is fetched again);
    None when there is nothing worth revalidating or the HEAD gave no answer."""
    try:
        size = os.stat(path).st_size
    except OSError:
        return None
    if size < COMPACT_MIN:
        return None  # small: GET and compare the bytes, as cheap as a HEAD
    try:
        info = await store.head(INDEX)
    except StorageError as exc:
        if not exc.retryable:
            return None  # e.g. a server that refuses HEAD: the GET decides
        return _unreadable(store.url, exc, local, bound)  # unreachable: as when the GET fails
    if info.etag and info.size == size:
        meta = compact_meta(compact)
        if (
            meta is not None
            and meta.get("etag") == info.etag
            and meta.get("size") == info.size
            and meta.get("digest") == bound.digest
        ):
            got = _load_compact(compact, bound.digest)
            if got is not None:
                for d in new_dirs(local):
                    if not is_entry(d):
                        mark_entry(d, store.url)
                return got
    return info


def _load_compact(compact: str, digest: str) -> Index | None:
    """The compact copy at ``compact`` when it was made from the index whose digest is
    ``digest``; None when absent, of another index, or unreadable."""
    try:
        table, extra, meta = from_compact(compact, _templates)
    except (OSError, ValueError, KeyError, TypeError, FormatError, msgspec.MsgspecError):
        return None
    if meta.get("digest") != digest:
        return None
    return Index(table, extra)


def _templates(objs: list[dict[str, Any]]) -> list[ShardEntry]:
    """Template entries of a compact copy, validated again by the validating parser."""
    doc = json.dumps({"shards": objs, "version": 2}).encode()
    return list(parse_index_validating(doc, "compact index").shards)


def _keep_compact(
    compact: str,
    local: str,
    index: Index,
    data: bytes,
    digest: str,
    head: ObjectInfo | None,
    readable: bool,
) -> None:
    """Keep a compact copy of a large index beside the cached index.json, with the ETag the
    remote reported before the GET (when its size matches the bytes fetched); drop a copy
    that no longer matches. A failure to write it costs only speed: never an error."""
    etag = head.etag if head is not None and head.size == len(data) else None
    if len(data) < COMPACT_MIN:
        if os.path.exists(compact):
            _unlink(compact)
        return
    want = {"digest": digest, "etag": etag, "size": len(data)}
    if readable and compact_meta(compact) == want:
        return
    blob = index.table.to_compact(want, index.extra)
    if blob is None:
        _unlink(compact)
        return
    try:
        write_atomic(compact, blob, local, tmp=f"{compact}.{os.getpid()}")
    except (OSError, ValueError):  # ValueError: CacheError, a full disk
        _unlink(compact)


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _parse_or_none(data: bytes | None, path: str) -> Index | None:
    if data is None:
        return None
    try:
        return parse_index(data, path)
    except FormatError:
        return None


def _warm_copy(local: str, bound: Binding | None) -> Index | None:
    """The cached index when ``local`` holds a complete copy of the dataset it is bound to:
    the index is the one the binding names and every shard is there at its full size."""
    if bound is None:
        return None
    path = os.path.join(local, INDEX)
    data = _read(path)
    if data is None or index_digest(data) != bound.digest:
        return None
    index = _parse_or_none(data, path)
    if index is None:
        return None
    for entry in index.shards:
        try:
            if (
                os.stat(os.path.join(local, entry.raw_data.basename)).st_size
                != entry.raw_data.bytes
            ):
                return None
        except FileNotFoundError:
            return None
    return index


def _same_table(a: Index | None, b: Index) -> bool:
    return a is not None and [e.to_json() for e in a.shards] == [e.to_json() for e in b.shards]


def _drop_stale(local: str, old: Index | None, new: Index) -> None:
    """Delete cached shard files that no longer match the (new) index: a shard whose index
    entry changed at all (size, sample count, hashes, encodings); every named file when the old
    index is unknown. An unchanged entry keeps its file only when the entry pins the bytes with
    a digest: without one, a dataset republished under the same names (``exist_ok``) may hold
    other bytes of the same size, and the old copy would be served."""
    same: set[str] = set()
    if old is not None:
        before = {e.raw_data.basename: e.to_json() for e in old.shards}
        for e in new.shards:
            pinned = bool(e.raw_data.hashes) and (e.zip_data is None or bool(e.zip_data.hashes))
            if pinned and before.get(e.raw_data.basename) == e.to_json():
                same.add(e.raw_data.basename)
    for entry in new.shards:
        keep = entry.raw_data.basename in same
        for info in (entry.raw_data, entry.zip_data):
            if info is None:
                continue
            p = os.path.join(local, info.basename)
            try:
                if not keep or os.stat(p).st_size != info.bytes:
                    os.unlink(p)
            except FileNotFoundError:
                pass


def _refuse_orphans(local: str, index: Index) -> None:
    """Shard files in a directory without an index or binding belong to no one we know."""
    try:  # one listing, then a stat only for names whose top directory entry exists
        present = set(os.listdir(local))
    except (FileNotFoundError, NotADirectoryError):
        return
    for name in index.table.file_names() if present else []:
        if name.split("/", 1)[0] in present and os.path.exists(os.path.join(local, name)):
            raise ConfigError(
                f"local={local!r} holds {name} but no {INDEX} and no binding: "
                "astream cannot tell which dataset it belongs to and will not serve or "
                "overwrite it; give `local` an empty or new directory"
            )
