"""The Parquet index builder's contract on local tables, pinned down exactly (S3:
``test_mutants_index_s3.py``).

- ``build_table`` (public): a cold build reads every footer; given the cached table it reads
  none and returns a ParquetTable; ``files=`` and ``split=`` choose the files; a published
  index is used unless ``use_published=False``; a changed file is a FormatError whose whole
  message is checked; a store with only the ObjectStore protocol lists serially.
- ``index_source="published"`` (``load_parquet(published=True)``): the refusal without a
  published index, the record kept beside the cache (its exact fields), a short read, a
  damaged index and a split that selects nothing are typed errors naming the index's URL.
- The local cache: bound to its remote (another remote is refused), a warm start writes
  nothing; an in-place table on a read-only disk goes without a cache.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from astream.errors import ConfigError, EmptyDatasetError, FormatError
from astream.parquet import io_footers
from astream.parquet.io_index import CACHE_NAME, PUBLISHED_MARK, build_table, load_parquet
from astream.parquet.published import INDEX_NAME, dump_table
from astream.parquet.table import ParquetTable
from astream.storage import open_store


def _parquet(i: int) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.table({"x": pa.array([i, 10 * i], pa.int64())}), buf)
    return buf.getvalue()


def _write(root: str, names: list[str]) -> None:
    for i, n in enumerate(names):
        path = os.path.join(root, n)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(_parquet(i))


def _build(root: str, **kw: Any) -> tuple[ParquetTable, int]:
    async def go() -> tuple[ParquetTable, int]:
        store = open_store(root)
        try:
            return await build_table(store, **kw)
        finally:
            await store.aclose()

    return asyncio.run(go())


def _publish(root: str) -> None:
    from astream.cli import main as cli

    assert cli(["index", root]) == 0


NAMES = ["a.parquet", "b.parquet", "train/c.parquet", "train/d.parquet", "notes.txt"]


# --- build_table -----------------------------------------------------------------------------


def test_build_table_cold_then_warm(tmp_path: Any, reads: list[str]) -> None:
    root = str(tmp_path / "t")
    _write(root, NAMES)
    table, n = _build(root)
    keys = ["a.parquet", "b.parquet", "train/c.parquet", "train/d.parquet"]
    assert [f.key for f in table.files] == keys and n == 4
    assert sorted(reads) == keys
    reads.clear()
    again, n = _build(root, cached=table)
    assert type(again) is ParquetTable and n == 0 and reads == []
    assert [(f.key, f.size, f.etag) for f in again.files] == [
        (f.key, f.size, f.etag) for f in table.files
    ]
    # a new file: only its footer is read; the others come from the cached table
    _write(root, ["b.parquet", "e.parquet"][1:])
    grown, n = _build(root, cached=table)
    assert [f.key for f in grown.files] == sorted([*keys, "e.parquet"]) and n == 1
    assert reads == ["e.parquet"]


def test_build_table_files_and_split(tmp_path: Any, reads: list[str]) -> None:
    root = str(tmp_path / "t")
    _write(root, NAMES)
    table, n = _build(root, files=["b.parquet", "train/d.parquet"])
    assert [f.key for f in table.files] == ["b.parquet", "train/d.parquet"] and n == 2
    table, n = _build(root, split="train")
    assert [f.key for f in table.files] == ["train/c.parquet", "train/d.parquet"] and n == 2


def test_build_table_refuses_a_changed_cached_file(tmp_path: Any) -> None:
    root = str(tmp_path / "t")
    _write(root, NAMES)
    table, _ = _build(root)
    with open(os.path.join(root, "b.parquet"), "wb") as f:
        f.write(_parquet(7) + b"\0")
    with pytest.raises(FormatError) as e:
        _build(root, cached=table)
    assert str(e.value).startswith(f"{os.path.join(root, 'b.parquet')}: changed since its Parquet")


def test_build_table_uses_a_published_index_unless_told_not_to(
    tmp_path: Any, reads: list[str]
) -> None:
    root = str(tmp_path / "t")
    _write(root, NAMES)
    _publish(root)
    reads.clear()
    table, n = _build(root)
    assert len(table.files) == 4 and n == 0 and reads == []
    table, n = _build(root, use_published=False)
    assert len(table.files) == 4 and n == 4 and len(reads) == 4


def test_a_damaged_published_index_names_itself(tmp_path: Any) -> None:
    root = str(tmp_path / "t")
    _write(root, NAMES)
    with open(os.path.join(root, INDEX_NAME), "wb") as f:
        f.write(b"not an index")
    with pytest.raises(FormatError) as e:
        _build(root)
    assert str(e.value).startswith(os.path.join(root, INDEX_NAME) + ": ")


# --- index_source="published" ----------------------------------------------------------------


def _load(root: str, local: str, store: Any = None, **kw: Any) -> Any:
    async def go() -> Any:
        s = store or open_store(root)
        try:
            return await load_parquet(s, local, columns=None, files=None, in_place=False,
                                      published=True, **{"split": None, **kw})  # fmt: skip
        finally:
            await s.aclose()

    return asyncio.run(go())


def test_published_refused_without_a_published_index(tmp_path: Any) -> None:
    root = str(tmp_path / "t")
    _write(root, NAMES)
    store = open_store(root)
    with pytest.raises(ConfigError) as e:
        _load(root, str(tmp_path / "c"))
    url = store.url_for(INDEX_NAME)
    assert str(e.value) == (
        f"index_source='published': there is no published index {url}; write it with "
        f"`astream index {store.url}`, or list the files (index_source=None)"
    )


def test_published_record_beside_the_cache(tmp_path: Any, reads: list[str]) -> None:
    root = str(tmp_path / "t")
    _write(root, NAMES)
    _publish(root)
    reads.clear()
    local = str(tmp_path / "c")
    index = _load(root, local, split="train")
    assert [s.samples for s in index.shards] == [2, 2]
    cache = os.path.join(local, ".astream", CACHE_NAME)
    with open(cache, "rb") as f:
        digest = f.read()[-32:].hex()
    head = asyncio.run(_head(root, INDEX_NAME))
    with open(cache + PUBLISHED_MARK, "rb") as f:
        mark = json.loads(f.read())
    assert mark == {"size": head.size, "etag": head.etag, "split": "train", "digest": digest}
    # the record is read as JSON in whatever encoding JSON allows: an equal record in UTF-16
    # is the same record, the cache is used and nothing is rewritten
    with open(cache + PUBLISHED_MARK, "wb") as f:
        f.write(json.dumps(mark).encode("utf-16"))
    before = os.stat(cache).st_mtime_ns
    assert [s.samples for s in _load(root, local, split="train").shards] == [2, 2]
    with open(cache + PUBLISHED_MARK, "rb") as f:
        assert f.read() == json.dumps(mark).encode("utf-16")
    assert os.stat(cache).st_mtime_ns == before and reads == []


async def _head(root: str, key: str) -> Any:
    store = open_store(root)
    try:
        return await store.head(key)
    finally:
        await store.aclose()


def test_published_split_that_selects_nothing(tmp_path: Any) -> None:
    root = str(tmp_path / "t")
    _write(root, NAMES)
    _publish(root)
    url = open_store(root).url_for(INDEX_NAME)
    with pytest.raises(EmptyDatasetError) as e:
        _load(root, str(tmp_path / "c"), split="nope")
    assert str(e.value) == f"the published index lists no *.parquet objects: {url} (split 'nope')"


def test_published_index_with_no_files(tmp_path: Any) -> None:
    root = str(tmp_path / "t")
    os.makedirs(root)
    with open(os.path.join(root, INDEX_NAME), "wb") as f:
        f.write(dump_table(ParquetTable(())))
    url = open_store(root).url_for(INDEX_NAME)
    with pytest.raises(EmptyDatasetError) as e:
        _load(root, str(tmp_path / "c"))
    assert str(e.value) == f"the published index lists no *.parquet objects: {url}"


def test_published_damaged_index_names_it(tmp_path: Any) -> None:
    root = str(tmp_path / "t")
    _write(root, NAMES)
    with open(os.path.join(root, INDEX_NAME), "wb") as f:
        f.write(b"PAR1 damaged")
    url = open_store(root).url_for(INDEX_NAME)
    with pytest.raises(FormatError) as e:
        _load(root, str(tmp_path / "c"))
    assert str(e.value).startswith(f"{url}: ")


class ShortRead:
    """A real store whose reads of the published index come back one byte short (a transfer
    the transport did not notice was cut)."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def get_range(self, key: str, *args: Any, **kw: Any) -> bytes:
        data: bytes = await self._store.get_range(key, *args, **kw)
        return data[:-1] if key == INDEX_NAME else data


def test_published_short_read_is_a_format_error(tmp_path: Any) -> None:
    root = str(tmp_path / "t")
    _write(root, NAMES)
    _publish(root)
    size = os.path.getsize(os.path.join(root, INDEX_NAME))
    store = open_store(root)
    url = store.url_for(INDEX_NAME)
    with pytest.raises(FormatError) as e:
        _load(root, str(tmp_path / "c"), store=ShortRead(store))
    assert str(e.value) == f"{url}: read {size - 1} bytes, its HEAD said {size}"


# --- the local cache -------------------------------------------------------------------------


def _load_listed(root: str, local: str, in_place: bool = False) -> Any:
    async def go() -> Any:
        store = open_store(root)
        try:
            return await load_parquet(store, local, columns=None, files=None, split=None,
                                      in_place=in_place)  # fmt: skip
        finally:
            await store.aclose()

    return asyncio.run(go())


def test_the_cache_is_bound_to_its_remote_and_a_warm_start_writes_nothing(tmp_path: Any) -> None:
    from astream.runtime.binding import Binding, read_binding

    root, other = str(tmp_path / "t"), str(tmp_path / "u")
    _write(root, NAMES)
    _write(other, NAMES[:1])
    local = str(tmp_path / "c" / "deep")
    index = _load_listed(root, local)
    assert [s.samples for s in index.shards] == [2, 2, 2, 2]
    meta = os.path.join(local, ".astream")
    cache = os.path.join(meta, CACHE_NAME)
    with open(cache, "rb") as f:
        digest = f.read()[-32:].hex()
    url = open_store(root).url
    assert read_binding(local) == Binding(url, digest)
    with open(os.path.join(meta, "entry"), "rb") as f:  # marked as astream's own
        assert json.loads(f.read()) == {"created_by": "astream", "remote": url}
    stamps = {n: os.stat(os.path.join(meta, n)).st_mtime_ns for n in os.listdir(meta)}
    assert [s.samples for s in _load_listed(root, local).shards] == [2, 2, 2, 2]
    assert {n: os.stat(os.path.join(meta, n)).st_mtime_ns for n in os.listdir(meta)} == stamps
    with pytest.raises(ConfigError) as e:
        _load_listed(other, local)
    assert str(e.value) == (
        f"local={local!r} is the cache of {url}; it cannot also hold "
        f"{open_store(other).url}: give this dataset its own `local`"
    )
    # a grown table rewrites the cache and re-binds to its digest
    _write(root, ["a.parquet", "z.parquet"][1:])
    assert len(_load_listed(root, local).shards) == 5
    with open(cache, "rb") as f:
        assert read_binding(local) == Binding(url, f.read()[-32:].hex())


def test_an_in_place_table_on_a_read_only_disk_goes_without_a_cache(
    tmpfs: Any, tmp_path: Any
) -> None:
    import subprocess

    root = tmpfs(1024)
    _write(root, NAMES)
    subprocess.run(["mount", "-o", "remount,ro", root], check=True)
    index = _load_listed(root, root, in_place=True)
    assert [s.samples for s in index.shards] == [2, 2, 2, 2]
    assert not os.path.exists(os.path.join(root, ".astream"))


@pytest.mark.parametrize("in_place", [True, False])
def test_a_cache_that_cannot_be_written(tmp_path: Any, in_place: bool) -> None:
    """The cache file's temp name taken by a directory: an in-place table (its data directory
    is the cache) goes without the cache; a cache directory that cannot hold it is an error."""
    root = str(tmp_path / "t")
    _write(root, NAMES)
    local = root if in_place else str(tmp_path / "c")
    cache = os.path.join(local, ".astream", CACHE_NAME)
    os.makedirs(f"{cache}.tmp-{os.getpid()}")
    if in_place:
        assert len(_load_listed(root, local, in_place=True).shards) == 4
        assert not os.path.exists(cache)
    else:
        with pytest.raises(IsADirectoryError):
            _load_listed(root, local)


# --- stores -------------------------------------------------------------------------------


class Plain:
    """A real store seen only through the ObjectStore protocol: no ``raw`` backend, no
    ``get_tail``, no ``lists_from_key``/``list_between`` (a store astream did not make)."""

    def __init__(self, store: Any) -> None:
        self._s = store

    @property
    def url(self) -> str:
        return str(self._s.url)

    def url_for(self, key: str) -> str:
        return str(self._s.url_for(key))

    async def get_range(self, key: str, *args: Any, **kw: Any) -> bytes:
        data: bytes = await self._s.get_range(key, *args, **kw)
        return data

    async def head(self, key: str) -> Any:
        return await self._s.head(key)

    def list(self, prefix: str = "") -> Any:
        return self._s.list(prefix)

    async def aclose(self) -> None:
        await self._s.aclose()


def test_a_store_with_only_the_protocol(tmp_path: Any, reads: list[str]) -> None:
    root = str(tmp_path / "t")
    _write(root, NAMES)

    async def go(**kw: Any) -> tuple[ParquetTable, int]:
        store = Plain(open_store(root))
        try:
            return await build_table(store, **kw)  # type: ignore[arg-type]
        finally:
            await store.aclose()

    table, n = asyncio.run(go())
    assert len(table.files) == 4 and n == 4
    again, n = asyncio.run(go(cached=table))
    assert n == 0 and [f.key for f in again.files] == [f.key for f in table.files]
    reads.clear()
    picked, n = asyncio.run(go(files=["b.parquet", "a.parquet"]))  # HEADs, then the footers
    assert [f.key for f in picked.files] == ["b.parquet", "a.parquet"] and n == 2
    assert sorted(reads) == ["a.parquet", "b.parquet"]


class PagedPlain(Plain):
    """:class:`Plain` with a backend that reports a listing page of 3 keys."""

    raw = type("Raw", (), {"list_page_size": 3})()


def test_a_store_that_cannot_list_from_a_key_lists_serially(tmp_path: Any) -> None:
    root = str(tmp_path / "t")
    _write(root, NAMES)

    async def go(**kw: Any) -> tuple[ParquetTable, int]:
        store = PagedPlain(open_store(root))
        try:
            return await build_table(store, **kw)  # type: ignore[arg-type]
        finally:
            await store.aclose()

    table, n = asyncio.run(go())
    again, n = asyncio.run(go(cached=table))  # 4 cached keys > a range's 1: still serial
    assert n == 0 and len(again.files) == 4


@pytest.mark.parametrize("source", ["cache", "published"])
def test_a_changed_file_message(tmp_path: Any, source: str) -> None:
    root = str(tmp_path / "t")
    _write(root, NAMES)
    if source == "published":
        _publish(root)
        cached = None
    else:
        cached, _ = _build(root)
    store = open_store(root)
    old = asyncio.run(_head(root, "b.parquet"))
    with open(os.path.join(root, "b.parquet"), "ab") as f:
        f.write(b"\0\0")
    new = asyncio.run(_head(root, "b.parquet"))
    with pytest.raises(FormatError) as e:
        _build(root, cached=cached)
    assert str(e.value) == (
        f"{store.url_for('b.parquet')}: changed since its Parquet index was built (was "
        f"{old.size} bytes, etag {old.etag}; now {new.size} bytes, etag {new.etag}): its rows "
        "would no longer be the ones the index (and any checkpoint) numbers; rebuild the index "
        "(`astream index`) and clear the cache directory, or restore the file"
    )


def test_a_damaged_cache_under_a_published_record_is_rebuilt(tmp_path: Any) -> None:
    """The cache damaged where its record cannot see (its trailing digest intact): its digest
    check fails, so it is not used; the published index is read again."""
    root = str(tmp_path / "t")
    _write(root, NAMES)
    _publish(root)
    local = str(tmp_path / "c")
    _load(root, local)
    cache = os.path.join(local, ".astream", CACHE_NAME)
    with open(cache, "rb") as f:
        good = f.read()
    bad = bytearray(good)
    bad[len(bad) // 2] ^= 0x40
    with open(cache, "wb") as f:
        f.write(bytes(bad))
    assert [s.samples for s in _load(root, local).shards] == [2, 2, 2, 2]
    with open(cache, "rb") as f:
        assert f.read() == good


def test_a_read_only_cache_directory_is_a_cache_error(tmpfs: Any, tmp_path: Any) -> None:
    import subprocess

    from astream.errors import CacheError

    root = str(tmp_path / "t")
    _write(root, NAMES)
    local = tmpfs(256)
    subprocess.run(["mount", "-o", "remount,ro", local], check=True)
    with pytest.raises(CacheError) as e:
        _load_listed(root, local)
    assert str(e.value).startswith(
        f"cache directory {local}: cannot write: read-only file system writing "
        f"{os.path.join(local, '.astream', CACHE_NAME)} ("
    )


def test_a_column_astream_cannot_serve_is_named_unless_projected_out(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nanosecond timestamps need pandas; without it (``_have_pandas`` false) such a column
    is refused naming the file, and a projection without it is served."""
    from astream.parquet import values

    root = str(tmp_path / "t")
    os.makedirs(root)
    ts = pa.array([1, 2], pa.timestamp("ns"))
    pq.write_table(pa.table({"x": pa.array([1, 2], pa.int64()), "t": ts}),
                   os.path.join(root, "a.parquet"))  # fmt: skip
    monkeypatch.setattr(values, "_have_pandas", lambda: False)
    url = open_store(root).url_for("a.parquet")

    async def go(columns: Any, local: str) -> Any:
        store = open_store(root)
        try:
            return await load_parquet(store, local, columns=columns, files=None, split=None,
                                      in_place=False)  # fmt: skip
        finally:
            await store.aclose()

    assert [s.samples for s in asyncio.run(go(["x"], str(tmp_path / "c1"))).shards] == [2]
    with pytest.raises(ConfigError) as e:
        asyncio.run(go(None, str(tmp_path / "c2")))
    assert str(e.value).startswith(f"columns: 't' of {url} is Arrow timestamp[ns], ")


def test_explicit_file_with_a_footer_longer_than_the_tail(tmp_path: Any) -> None:
    """``files=``: the tail read that gave the file's identity is too short for this footer
    (100 KB of schema metadata), so its head is read by a second GET from the same store."""
    root = str(tmp_path / "t")
    os.makedirs(root)
    table = pa.table({"x": pa.array([1, 2, 3], pa.int64())})
    table = table.replace_schema_metadata({"big": "m" * 100_000})
    pq.write_table(table, os.path.join(root, "big.parquet"))
    assert os.path.getsize(os.path.join(root, "big.parquet")) > io_footers.TAIL
    got, n = _build(root, files=["big.parquet"])
    assert n == 1 and [f.key for f in got.files] == ["big.parquet"]
    assert [rg.rows for rg in got.files[0].row_groups] == [3]
