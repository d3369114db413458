"""Building a Parquet table's index from its footers, and caching it by the objects' identity.

Theory of operation
-------------------
:func:`load_parquet` turns a Parquet source (a prefix listed through the ObjectStore, or an
explicit list of keys that are HEADed) into an :class:`~astream.core.index.Index` of row-group
virtual shards (:mod:`astream.parquet.table`):

1. List the objects (or, for ``files=``, read each unknown one's tail by a suffix-range GET,
   which also gives its size and identity, and HEAD the known ones): key, size,
   ETag/generation/mtime tag -- the *identity*. With a cached index and a backend that starts
   a listing at a key (S3 ``StartAfter``, GCS ``startOffset``), the key space is cut at the
   cached keys and the ranges are listed concurrently (:func:`_list_all`); other backends
   list serially.
2. Known files come from the local cache (``local/.astream/parquet-index.bin``) and from an
   index published next to the data by ``astream index`` (``_astream_parquet_index.bin``, read
   only when the local cache does not already cover the listing, and never looked for when the
   listing does not show it). A listed object whose identity equals a known file's reuses that
   entry: a warm start reads no footer.
3. A listed object whose key is known but whose identity differs changed under the index: a
   :class:`FormatError` naming it (its sample ids, and so any checkpoint, would silently mean
   other rows). Unknown objects get their footers read: one ranged GET of the last 64 KiB
   (a second when the footer is longer), all files concurrently -- no HEAD: the listing gave
   the size. On a cold start over a listing that runs in key order (S3, GCS: no cached
   index, no ``files=``), the footers of a page's objects are read while the next pages are
   listed (:func:`_list_reading`) -- once the listing has passed the key a published index
   would have, so that no footer is read where one exists. Reading a row group later is
   conditional on the indexed identity (see
   :mod:`astream.runtime.fetch`): a file rewritten while a job runs is an
   :class:`~astream.errors.ObjectChangedError`.
4. The local cache is rewritten (atomically) when it gained or lost files.

The local cache is the compact form (:class:`~astream.parquet.compact.CompactTable`: columns,
digest-checked): a warm start whose listing is exactly the cached files (same keys in the same
order, sizes and identities) returns it as is and builds the virtual shards from its arrays
(:func:`~astream.parquet.compact.compact_shards`); only a start that found new, removed or
changed files makes :class:`ParquetFile` objects (for the files it keeps, from the columns).

``published=True`` (``index_source="published"``) skips the listing: the table is the files
of the published index (:func:`_from_published`: one HEAD of it while the cache was made from
that same object, else one conditional GET and the validating parse). Reads stay conditional
on the published identities, so a rewritten file is an ObjectChangedError when read.

Footers are read by ``parquet/io_footers.py``. I/O (runtime level): this module lists and
reads through the ObjectStore and writes the cache directory.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

from astream.core.index import Index
from astream.errors import (
    CacheError,
    ConfigError,
    EmptyDatasetError,
    FormatError,
    ObjectNotFoundError,
)
from astream.parquet import arrow, io_footers
from astream.parquet.compact import (
    CompactTable,
    compact_shards,
    compact_table,
    dump_compact,
    is_compact,
    load_compact,
)
from astream.parquet.published import INDEX_NAME, parse_table
from astream.parquet.table import ParquetFile, ParquetTable, select_keys
from astream.runtime.binding import (
    Binding,
    is_entry,
    mark_entry,
    meta_dir,
    new_dirs,
    read_binding,
    write_atomic,
    write_binding,
)
from astream.storage.base import ObjectInfo, ObjectStore

__all__ = ["CACHE_NAME", "build_table", "load_parquet"]

CACHE_NAME = "parquet-index.bin"  # under local/.astream/
PUBLISHED_MARK = ".published"  # beside it: the published index a cache was made from
CONCURRENCY = 64  # footer reads in flight
LIST_CONCURRENCY = 16  # key ranges listed at once on a warm start (S3, GCS)


async def _list_all(store: ObjectStore, known: list[str]) -> list[ObjectInfo]:
    """Every object under the root. With ``known`` keys (a cached index) and a backend that
    starts a listing at a key (S3, GCS), the key space is cut at every ``page - 2``-th known
    key and the ranges are listed concurrently (one page each while nothing was added): every
    key is still seen, in one range exactly. Other backends list serially."""
    page = int(getattr(getattr(store, "raw", None), "list_page_size", 0) or 1000)
    width = max(1, page - 2)
    if not getattr(store, "lists_from_key", False) or len(known) <= width:
        return [o async for o in store.list("")]
    keys = sorted(known)
    uptos: list[str | None] = list(keys[width - 1 :: width])
    afters: list[str | None] = [None, *uptos]
    uptos.append(None)
    sem = asyncio.Semaphore(LIST_CONCURRENCY)

    async def one(after: str | None, upto: str | None) -> list[ObjectInfo]:
        async with sem:
            got: list[ObjectInfo] = await store.list_between("", after, upto)  # type: ignore[attr-defined]
            return got

    parts = await asyncio.gather(*(one(a, u) for a, u in zip(afters, uptos)))
    return [o for p in parts for o in p]


async def _objects(
    store: ObjectStore,
    files: list[str] | None,
    split: str | None,
    known: list[str],
    tails: dict[str, bytes],
) -> tuple[list[ObjectInfo], bool]:
    """The table's objects, and whether a published index may exist (False: the listing has
    none, so no GET is spent looking for it). Tails read on the way land in ``tails``."""
    if files is not None:
        # a known file is HEADed (its footer is not needed again); an unknown one is read by
        # one suffix-range GET that also gives its size and identity (Azure: HEAD + GET)
        sem = asyncio.Semaphore(CONCURRENCY)
        seen = set(known)
        tail_of = getattr(store, "get_tail", None)

        async def one(k: str) -> ObjectInfo:
            async with sem:
                if k in seen or tail_of is None:
                    return await store.head(k)
                got: tuple[ObjectInfo, bytes] = await tail_of(k, io_footers.TAIL)
                info, tails[k] = got
                return info

        return list(await asyncio.gather(*(one(k) for k in files))), True
    listed = {o.key: o for o in await _list_all(store, known)}
    return _selected(store, listed, split)


def _selected(
    store: ObjectStore, listed: dict[str, ObjectInfo], split: str | None
) -> tuple[list[ObjectInfo], bool]:
    """The table's objects among those listed, and whether the listing shows a published
    index."""
    keys = select_keys(list(listed), split)
    if not keys:
        where = store.url + (f" (split {split!r})" if split else "")
        raise EmptyDatasetError(f"no *.parquet objects under {where}")
    return [listed[k] for k in keys], INDEX_NAME in listed


async def _list_reading(
    store: ObjectStore, split: str | None, use_published: bool, started: dict[str, Any]
) -> tuple[list[ObjectInfo], bool]:
    """:func:`_objects` for a cold start over a listing in key order (S3, GCS): each listed
    object of the table has its footer read (a task in ``started``, by key) while the later
    pages are listed -- once a listed key sorts after :data:`INDEX_NAME` without it (a
    published index would be listed there), since where one is published no footer is read.
    Objects listed before that point wait for it (or for the listing's end)."""
    sem = asyncio.Semaphore(CONCURRENCY)

    async def read(info: ObjectInfo) -> ParquetFile:
        async with sem:
            return await io_footers.read_footer(store, info)

    def start(info: ObjectInfo) -> None:
        if select_keys([info.key], split):
            started[info.key] = asyncio.ensure_future(read(info))

    listed: dict[str, ObjectInfo] = {}
    held: list[ObjectInfo] = []
    clear = not use_published  # no published index can be used: read from the first page
    async for o in store.list(""):
        listed[o.key] = o
        if o.key == INDEX_NAME:
            held = []  # the published index may know them: read nothing before deciding
        elif clear:
            start(o)
        elif o.key > INDEX_NAME and INDEX_NAME not in listed:
            clear = True  # past where it would be listed: there is none
            for h in held:
                start(h)
            held = []
            start(o)
        elif INDEX_NAME not in listed:
            held.append(o)
    return _selected(store, listed, split)


def _read_cached(path: str) -> tuple[CompactTable, bytes] | None:
    """The cached index (as columns) and its bytes; None: absent or damaged. A cache in the
    older JSON form is read through the validating parser (and rewritten compact)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    if is_compact(data):
        ct = load_compact(data)  # its digest checked: astream wrote it, nothing else to check
        return None if ct is None else (ct, data)
    try:
        return compact_table(parse_table(data, path)), b""
    except FormatError:
        return None  # a damaged cache is rebuilt from the footers


async def _published(store: ObjectStore) -> ParquetTable | None:
    try:
        data = await store.get_range(INDEX_NAME)
    except ObjectNotFoundError:
        return None
    return parse_table(data, store.url_for(INDEX_NAME))


def _same(info: ObjectInfo, f: ParquetFile) -> bool:
    return info.size == f.size and (info.etag == f.etag or info.etag is None)


async def build_table(
    store: ObjectStore,
    *,
    files: list[str] | None = None,
    split: str | None = None,
    cached: ParquetTable | None = None,
    use_published: bool = True,
) -> tuple[ParquetTable, int]:
    """The table's index and the number of footers read (0 on a warm start)."""
    ct = None if cached is None else compact_table(cached)
    table, read = await _build(store, files, split, ct, use_published)
    return (table.table() if isinstance(table, CompactTable) else table), read


async def _build(
    store: ObjectStore,
    files: list[str] | None,
    split: str | None,
    cached: CompactTable | None,
    use_published: bool,
) -> tuple[ParquetTable | CompactTable, int]:
    """``cached`` itself when the objects are exactly its files (the warm start: no object per
    file or row group is made); else the table, footers read for the files no index knows."""
    started: dict[str, Any] = {}  # key -> the task reading its footer, begun while listing
    try:
        with io_footers.gc_paused():
            return await _build_from(store, files, split, cached, use_published, started)
    finally:
        for task in started.values():
            task.cancel()  # a read nothing awaits (an error, or the published index won)
        if started:
            await asyncio.gather(*started.values(), return_exceptions=True)


async def _build_from(
    store: ObjectStore,
    files: list[str] | None,
    split: str | None,
    cached: CompactTable | None,
    use_published: bool,
    started: dict[str, Any],
) -> tuple[ParquetTable | CompactTable, int]:
    at = {} if cached is None else {k: i for i, k in enumerate(cached.keys)}
    tails: dict[str, bytes] = {}
    if cached is None and files is None and getattr(store, "lists_from_key", False):
        infos, maybe_published = await _list_reading(store, split, use_published, started)
    else:
        infos, maybe_published = await _objects(store, files, split, list(at), tails)

    def hit(j: int, info: ObjectInfo) -> int | None:
        """The cached file ``info`` is, if any."""
        assert cached is not None
        i = at.get(info.key)
        if i is None or int(cached.sizes[i]) != info.size:
            return None
        return i if info.etag is None or cached.etags[i] == info.etag else None

    matched = [None if cached is None else hit(j, i) for j, i in enumerate(infos)]
    if cached is not None and len(infos) == len(cached) and matched == list(range(len(infos))):
        return cached, 0
    known: dict[str, list[ParquetFile]] = {}
    if use_published and maybe_published and any(m is None for m in matched):
        pub = await _published(store)
        for f in pub.files if pub is not None else ():
            known.setdefault(f.key, []).append(f)
    out: list[ParquetFile | None] = []
    todo: list[tuple[int, ObjectInfo]] = []
    for i, m in zip(infos, matched):
        assert cached is not None or m is None
        match = cached.file(m) if cached is not None and m is not None else None
        if match is None:
            match = next((f for f in known.get(i.key, ()) if _same(i, f)), None)
        if match is None and (i.key in known or i.key in at):
            old = known[i.key][0] if i.key in known else cached.file(at[i.key])  # type: ignore[union-attr]
            raise FormatError(
                f"changed since its Parquet index was built (was {old.size} bytes, etag "
                f"{old.etag}; now {i.size} bytes, etag {i.etag}): its rows would no longer be "
                "the ones the index (and any checkpoint) numbers; rebuild the index (`astream "
                "index`) and clear the cache directory, or restore the file",
                store.url_for(i.key),
            )
        out.append(match)
        if match is None:
            todo.append((len(out) - 1, i))
    sem = asyncio.Semaphore(CONCURRENCY)

    async def read(j: int, info: ObjectInfo) -> None:
        task = started.get(info.key)
        if task is not None:
            out[j] = await task
            return
        async with sem:
            tail = tails.get(info.key)
            if tail is None:
                out[j] = await io_footers.read_footer(store, info)
            else:
                out[j] = await io_footers.read_footer(store, info, tail)

    await asyncio.gather(*(read(j, i) for j, i in todo))
    return ParquetTable(tuple(f for f in out if f is not None)), len(todo)


async def _from_published(
    store: ObjectStore, path: str, hit: tuple[CompactTable, bytes] | None, split: str | None
) -> tuple[ParquetTable | CompactTable, dict[str, Any] | None]:
    """The table the published index defines, without listing the root: one HEAD of the index
    object; the cached table when it was made from that same object (its identity and the
    split are recorded beside the cache, with the cache's digest), else one GET of it
    (conditional on that identity) and its validating parse. Returns the table and, when it
    is not the cached one, the record to write beside the new cache."""
    url = store.url_for(INDEX_NAME)
    try:
        head = await store.head(INDEX_NAME)
    except ObjectNotFoundError:
        raise ConfigError(
            f"index_source='published': there is no published index {url}; write it with "
            f"`astream index {store.url}`, or list the files (index_source=None)"
        ) from None
    want = {"size": head.size, "etag": head.etag, "split": split}
    if hit is not None and hit[1] and head.etag is not None:  # no identity: always GET it
        try:
            with open(path + PUBLISHED_MARK, "rb") as f:
                mark = json.loads(f.read())
        except (OSError, ValueError):
            mark = None
        if mark == {**want, "digest": hit[1][-32:].hex()}:
            return hit[0], None
    data = await store.get_range(INDEX_NAME, etag=head.etag)
    if len(data) != head.size:
        raise FormatError(f"read {len(data)} bytes, its HEAD said {head.size}", url)
    pub = parse_table(data, url)
    keys = set(select_keys([f.key for f in pub.files], split))
    table = ParquetTable(tuple(f for f in pub.files if f.key in keys))
    if not table.files:
        where = url + (f" (split {split!r})" if split else "")
        raise EmptyDatasetError(f"the published index lists no *.parquet objects: {where}")
    return table, want


async def load_parquet(
    store: ObjectStore,
    local: str,
    *,
    columns: list[str] | None,
    files: list[str] | None,
    split: str | None,
    in_place: bool,
    published: bool = False,
) -> Index:
    """The stream's virtual-shard index (see the module docstring). ``in_place``: ``local`` is
    the data directory itself (no remote), whose cache index is best-effort. ``published``:
    the table is the published index's files, the root is not listed (:func:`_from_published`)."""
    # pyarrow is imported here even when no footer is read (warm start): DataLoader workers
    # forked from this process then inherit it instead of each importing it (~0.3-1 s a
    # worker, every epoch) before its first row group. In a thread, while the listing (and
    # the S3 client's start) wait on the network; a footer parse needing it waits for it.
    imported = asyncio.ensure_future(asyncio.to_thread(arrow.pyarrow_parquet))
    try:
        return await _load(store, local, columns=columns, files=files, split=split,
                           in_place=in_place, published=published)  # fmt: skip
    finally:
        await imported


async def _load(
    store: ObjectStore,
    local: str,
    *,
    columns: list[str] | None,
    files: list[str] | None,
    split: str | None,
    in_place: bool,
    published: bool,
) -> Index:
    if not in_place:
        bound = read_binding(local)
        if bound is not None and bound.remote != store.url:
            raise ConfigError(
                f"local={local!r} is the cache of {bound.remote}; it cannot also hold "
                f"{store.url}: give this dataset its own `local`"
            )
    path = os.path.join(meta_dir(local), CACHE_NAME)
    hit = _read_cached(path)
    cached = None if hit is None else hit[0]
    mark: dict[str, Any] | None = None
    if published:
        table, mark = await _from_published(store, path, hit, split)
    else:
        table, _ = await _build(store, files, split, cached, True)
    if table is cached and hit is not None and hit[1]:
        ct, data = cached, hit[1]  # a warm start over the same files writes nothing
    else:
        ct = table if isinstance(table, CompactTable) else compact_table(table)
        data = dump_compact(ct)
        try:
            write_atomic(path, data, local)
            if mark is not None:
                mark["digest"] = data[-32:].hex()
                write_atomic(path + PUBLISHED_MARK, json.dumps(mark).encode(), local)
        except (OSError, CacheError):  # CacheError: a full or read-only disk (write_atomic)
            if not in_place:
                raise  # a read-only data directory just goes without a cached index
    if not in_place:
        for d in new_dirs(local):
            if not is_entry(d):
                mark_entry(d, store.url)
        digest = data[-32:].hex()  # the compact file's own blake2b of its contents
        bound = read_binding(local)
        if bound is None or bound.digest != digest:
            write_binding(local, Binding(store.url, digest))
    shards = compact_shards(ct, columns)
    if len(ct):  # every projected column of a type astream reads (the files agree on types)
        from astream.parquet.arrow import file_metadata
        from astream.parquet.values import check_columns

        first = ct.file(0)
        want = first.columns if columns is None else columns
        schema = file_metadata(first).schema.to_arrow_schema()
        check_columns(schema, want, store.url_for(first.key))
    return Index(shards)
