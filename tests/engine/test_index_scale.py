"""The catalog over shard columns: what it builds on demand equals what it built per shard before,
and the cache-directory checks that walk the index see every file it names."""

from __future__ import annotations

import json
import os
import shutil
from typing import Any

import pytest

from astream import MDSWriter, Stream, StreamingDataset
from astream.errors import ConfigError
from astream.runtime.catalog import _remote_shard, _with_meta


def _write(path: str, n: int, **kw: Any) -> str:
    with MDSWriter(out=path, columns={"data": "bytes", "id": "int"}, size_limit=3_000, **kw) as w:
        for i in range(n):
            w.write({"id": i, "data": bytes([i % 256]) * 200})
    return path


def _merged(root: str, parts: int, n: int) -> str:
    """A dataset whose index names shards in sub-directories (what merge_index writes)."""
    shards = []
    for p in range(parts):
        _write(os.path.join(root, f"part{p}"), n)
        with open(os.path.join(root, f"part{p}", "index.json")) as f:
            for s in json.load(f)["shards"]:
                s["raw_data"]["basename"] = f"part{p}/" + s["raw_data"]["basename"]
                if s["zip_data"]:
                    s["zip_data"]["basename"] = f"part{p}/" + s["zip_data"]["basename"]
                shards.append(s)
    with open(os.path.join(root, "index.json"), "w") as f:
        json.dump({"shards": shards, "version": 2}, f)
    return root


def test_catalog_builds_each_shard_as_it_did_eagerly(tmp_path: Any) -> None:
    a = _write(str(tmp_path / "a"), 40)
    b = _write(str(tmp_path / "b"), 30, compression="zstd", hashes=["xxh64"])
    ds = StreamingDataset(
        streams=[Stream(local=a), Stream(remote=b, local=str(tmp_path / "cache"))], batch_size=4
    )
    cat = ds.catalog
    eager = [
        (entry, _with_meta(entry, _remote_shard(src, entry)))
        for src in cat.sources
        for entry in src.index.shards
    ]
    assert len(cat.shards) == len(cat.entries) == len(eager) == ds.num_shards
    assert len(cat.sources[0].index.shards) >= 3 and cat.sources[1].index.table.zip_names
    for s, (entry, shard) in enumerate(eager):
        assert cat.entries[s] == entry and cat.shards[s] == shard
        assert cat.shards[s] is cat.shards[s]  # built once
    assert cat.entries[-1] == eager[-1][0] and cat.shards[1:3] == [e[1] for e in eager[1:3]]
    with pytest.raises(IndexError):
        cat.shards[len(eager)]
    assert cat.max_footprint == max(s.files.footprint() for _, s in eager)
    assert [e.samples for e in cat.entries] == cat.stream_sizes[0].tolist() + (
        cat.stream_sizes[1].tolist()
    )
    assert sorted(int(x["id"]) for x in ds) == sorted([*range(40), *range(30)])


def test_orphan_shards_in_a_subdirectory_are_refused(tmp_path: Any) -> None:
    remote = _merged(str(tmp_path / "r"), 2, 20)
    local = str(tmp_path / "c")
    os.makedirs(local)
    shutil.copytree(os.path.join(remote, "part1"), os.path.join(local, "part1"))
    os.unlink(os.path.join(local, "part1", "index.json"))
    with pytest.raises(ConfigError, match=r"holds part1/shard\.00000\.mds but no index\.json"):
        StreamingDataset(remote=remote, local=local, batch_size=4)
    # unrelated files in the directory are not shards of this index
    shutil.rmtree(os.path.join(local, "part1"))
    os.makedirs(os.path.join(local, "part9"))
    with open(os.path.join(local, "part9", "shard.00000.mds"), "wb") as f:
        f.write(b"x")
    ds = StreamingDataset(remote=remote, local=local, batch_size=4)
    assert sorted(int(x["id"]) for x in ds) == sorted([*range(20), *range(20)])


def test_a_dropped_dataset_frees_its_catalog_without_a_collection(tmp_path: Any) -> None:
    import gc
    import weakref

    ds = StreamingDataset(local=_write(str(tmp_path / "a"), 10), batch_size=4)
    assert ds.catalog.shards[0].files.raw_path and ds.catalog.entries[0].samples
    ref = weakref.ref(ds.catalog)
    gc.disable()  # its cache leases go with it: `astream cache clear` must not see it in use
    try:
        del ds
        assert ref() is None
    finally:
        gc.enable()
