"""A complete local copy with an absent remote is read, as the reference reads it.

``local`` holds what ``MDSWriter`` wrote there (never bound to a remote) and ``remote`` names a
local path or an S3 prefix that does not exist. The reference opens the local ``index.json``
without looking at the remote, so it streams the local copy; astream does too, with one warning,
reading the copy in place as local-only data (never evicted, the directory left unbound). When
that copy lacks a file (a shard deleted or cut short) the dataset is one error of the store's
type, naming the remote, ``local`` and the file.
"""

from __future__ import annotations

import os
import uuid
import warnings
from typing import Any

import numpy as np
import pytest

from astream import StreamingDataset
from astream.errors import CacheError, ObjectNotFoundError
from astream.runtime.binding import read_binding

from .conftest import write_dataset


def _absent(kind: str, tmp_path: Any, bucket: str | None) -> str:
    if kind == "path":
        return str(tmp_path / "no" / "such" / "remote")
    assert bucket is not None
    return f"{bucket}/never-{uuid.uuid4().hex[:8]}"


def _files(local: str) -> dict[str, bytes]:
    out = {}
    for name in sorted(os.listdir(local)):
        if not os.path.isfile(os.path.join(local, name)):
            continue
        with open(os.path.join(local, name), "rb") as f:
            out[name] = f.read()
    return out


def _build(**kw: Any) -> tuple[StreamingDataset, list[str]]:
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        ds = StreamingDataset(**kw)
    return ds, [str(w.message) for w in rec if "cannot be read" in str(w.message)]


@pytest.fixture
def bucket(request: pytest.FixtureRequest) -> str | None:
    if request.node.callspec.params.get("kind") == "s3":
        return str(request.getfixturevalue("s3_bucket"))
    return None


@pytest.mark.parametrize("compression", [None, "zstd"])
@pytest.mark.parametrize("kind", ["path", "s3"])
def test_complete_local_copy_is_read_exactly(
    tmp_path: Any, kind: str, compression: str | None, bucket: str | None
) -> None:
    local = str(tmp_path / "written")
    samples = write_dataset(local, 300, compression=compression)
    before = _files(local)
    remote = _absent(kind, tmp_path, bucket)
    ds, msgs = _build(remote=remote, local=local, batch_size=8, shuffle=False)
    assert len(msgs) == 1 and remote in msgs[0] and local in msgs[0], msgs
    got = list(ds)
    assert [int(s["label"]) for s in got] == list(range(300))  # index order, every sample
    for s in got:
        want = samples[s["label"]]
        assert np.array_equal(s["ids"], want["ids"]) and s["text"] == want["text"]
    assert ds[123]["label"] == 123
    # read in place: local-only data, never evicted (only a shard decompressed from it may
    # be, the compressed file staying); the directory stays unbound
    if compression is None:
        with pytest.raises(CacheError):
            ds.evict_shard(0)
    else:
        ds.evict_shard(0)
        assert ds[0]["label"] == 0
    assert read_binding(local) is None
    after = {k: v for k, v in _files(local).items() if k in before}
    assert after == before
    # shuffled, and a second dataset on the same copy: the same samples
    ds2, _ = _build(remote=remote, local=local, batch_size=8, shuffle=True, shuffle_seed=5)
    assert sorted(int(s["label"]) for s in ds2) == list(range(300))


@pytest.mark.parametrize("damage", ["missing", "short"])
@pytest.mark.parametrize("kind", ["path", "s3"])
def test_incomplete_local_copy_is_one_error_naming_both(
    tmp_path: Any, kind: str, damage: str, bucket: str | None
) -> None:
    local = str(tmp_path / "written")
    write_dataset(local, 300)
    shard = os.path.join(local, "shard.00001.mds")
    if damage == "missing":
        os.unlink(shard)
    else:
        os.truncate(shard, 100)
    remote = _absent(kind, tmp_path, bucket)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        with pytest.raises(ObjectNotFoundError) as e:
            StreamingDataset(remote=remote, local=local, batch_size=8)
    msg = str(e.value)
    assert remote in msg and f"local={local!r}" in msg, msg
    assert "index.json" in msg and "shard 1: shard.00001.mds" in msg, msg
    assert ("is missing" if damage == "missing" else "has 100 bytes") in msg, msg
    assert not [w for w in rec if "cannot be read" in str(w.message)]
    assert isinstance(e.value, FileNotFoundError)
