"""A large remote index is kept parsed (the compact copy) and revalidated by a HEAD: on each
cloud emulator, a changed remote index is always fetched and used, never the stale copy."""

from __future__ import annotations

import asyncio
import json
import mmap
import os
import uuid
from typing import Any

import pytest

from astream.core.index import Index, dump_index
from astream.core.shard_table import compact_meta
from astream.runtime.index_load import COMPACT, COMPACT_MIN, INDEX, load_index
from astream.storage import ObjectStore, open_store

BUCKETS = {"s3": ("s3_bucket", "s3_server"), "gcs": ("gcs_bucket", "gcs_server"),
           "azure": ("azure_container", "azure_server")}  # fmt: skip


def _index(n: int, samples0: int = 1000) -> bytes:
    shard = {
        "column_encodings": ["int", "bytes"],
        "column_names": ["id", "data"],
        "column_sizes": [8, None],
        "compression": None,
        "format": "mds",
        "hashes": [],
        "samples": 1000,
        "size_limit": 1 << 26,
        "version": 2,
        "zip_data": None,
    }
    shards = [
        {
            **shard,
            "samples": samples0 if i == 0 else 1000,
            "raw_data": {"basename": f"shard.{i:05d}.mds", "bytes": 50_000 + i, "hashes": {}},
        }
        for i in range(n)
    ]
    return json.dumps({"shards": shards, "version": 2}, sort_keys=True).encode()


class Counting:
    """The real store, with its GETs and HEADs of the index counted."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self.gets = 0
        self.heads = 0
        self.url = store.url
        self.url_for = store.url_for

    async def get_range(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        self.gets += 1
        return await self.store.get_range(key, start, end)

    async def head(self, key: str) -> Any:
        self.heads += 1
        return await self.store.head(key)


def _load(url: str, opts: dict[str, Any], local: str) -> tuple[Index, int, int]:
    async def go() -> tuple[Index, int, int]:
        store = open_store(url, **opts)
        try:
            counted = Counting(store)
            index = await load_index(counted, local)  # type: ignore[arg-type]
            return index, counted.gets, counted.heads
        finally:
            await store.aclose()

    return asyncio.run(go())


def _put(url: str, opts: dict[str, Any], data: bytes) -> None:
    async def go() -> None:
        store = open_store(url, **opts)
        try:
            await store.put(INDEX, data)
        finally:
            await store.aclose()

    asyncio.run(go())


def _mapped(index: Index) -> bool:
    """Whether the index's columns are views of the mapped compact copy."""
    base = index.table.samples.base
    while base is not None and not isinstance(base, mmap.mmap):
        base = base.obj if isinstance(base, memoryview) else getattr(base, "base", None)
    return isinstance(base, mmap.mmap)


@pytest.mark.parametrize("backend", sorted(BUCKETS))
def test_changed_remote_index_is_used_never_the_compact_copy(
    backend: str, request: pytest.FixtureRequest, tmp_path: Any
) -> None:
    bucket_fixture, server_fixture = BUCKETS[backend]
    bucket = request.getfixturevalue(bucket_fixture)
    opts = request.getfixturevalue(server_fixture).store_options()
    url = f"{bucket}/rv-{uuid.uuid4().hex[:8]}"
    first = _index(4_000)
    assert len(first) >= COMPACT_MIN
    _put(url, opts, first)
    local = str(tmp_path / "cache")
    compact = os.path.join(local, ".astream", COMPACT)

    # 1st load: GET and parse; the compact copy has no ETag yet (no HEAD before that GET)
    idx, gets, heads = _load(url, opts, local)
    assert (gets, heads) == (1, 0) and not _mapped(idx)
    assert idx.num_samples == 4_000_000 and len(idx.shards) == 4_000
    meta = compact_meta(compact)
    assert meta is not None and meta["etag"] is None and meta["size"] == len(first)
    # 2nd: HEAD, then GET (same bytes: the compact copy replaces the parse), ETag recorded
    idx2, gets, heads = _load(url, opts, local)
    assert (gets, heads) == (1, 1) and _mapped(idx2)
    meta = compact_meta(compact)
    assert meta is not None and meta["etag"]
    # 3rd: the HEAD alone; the table is the one parsed from the bytes
    idx3, gets, heads = _load(url, opts, local)
    assert (gets, heads) == (0, 1) and _mapped(idx3)
    assert idx3.shards == idx.shards and idx3.extra == idx.extra
    assert dump_index(idx3) == dump_index(idx)

    # the remote index changes, same size (one digit): the new content is used
    second = _index(4_000, samples0=1001)
    assert len(second) == len(first) and second != first
    _put(url, opts, second)
    idx4, gets, heads = _load(url, opts, local)
    assert (gets, heads) == (1, 1)
    assert int(idx4.table.samples[0]) == 1001 and idx4.num_samples == 4_000_001
    with open(os.path.join(local, INDEX), "rb") as f:
        assert f.read() == second
    idx5, gets, heads = _load(url, opts, local)  # revalidated against the new ETag
    assert (gets, heads) == (0, 1) and int(idx5.table.samples[0]) == 1001


def test_damaged_compact_copy_is_never_served(
    s3_bucket: str, s3_server: Any, tmp_path: Any
) -> None:
    opts = s3_server.store_options()
    url = f"{s3_bucket}/rv-{uuid.uuid4().hex[:8]}"
    data = _index(4_000)
    _put(url, opts, data)
    local = str(tmp_path / "cache")
    _load(url, opts, local)
    _load(url, opts, local)
    compact = os.path.join(local, ".astream", COMPACT)
    with open(compact, "r+b") as f:  # cut off the names: not a whole copy any more
        f.truncate(os.path.getsize(compact) - 1000)
    idx, gets, heads = _load(url, opts, local)
    assert (gets, heads) == (1, 1) and not _mapped(idx)  # parsed from the fetched bytes
    assert idx.table.raw_names[-1] == "shard.03999.mds" and idx.num_samples == 4_000_000
    idx2, gets, heads = _load(url, opts, local)  # the copy was written again
    assert (gets, heads) == (0, 1) and idx2.shards == idx.shards


def test_small_index_keeps_no_compact_copy(s3_bucket: str, s3_server: Any, tmp_path: Any) -> None:
    opts = s3_server.store_options()
    url = f"{s3_bucket}/rv-{uuid.uuid4().hex[:8]}"
    _put(url, opts, _index(10))
    local = str(tmp_path / "cache")
    for _ in range(2):
        idx, gets, heads = _load(url, opts, local)
        assert (gets, heads) == (1, 0) and len(idx.shards) == 10
    assert not os.path.exists(os.path.join(local, ".astream", COMPACT))
