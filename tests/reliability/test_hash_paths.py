"""``validate_hash`` on every read path that returns a sample.

One MDS dataset (xxh64 hashes) on the S3 emulator twice: as written, and with 10 bytes of one
sample's payload flipped in one shard (same size, index unchanged). With ``validate_hash`` each
read path -- ``ds[i]``, iteration, ``aget`` (both ``io`` modes), ``aget_many``, ``batches``, a
DataLoader with 2 workers -- raises ``IntegrityError`` naming that shard and never hands out the
corrupted sample; over the intact copy each returns exact samples. A Parquet stream, whose
files carry no hash in an index, is refused with ``validate_hash`` when the dataset is built.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from astream import Stream, StreamingDataLoader, StreamingDataset
from astream.errors import ConfigError, IntegrityError
from astream.storage.sync import upload

from .conftest import check_samples, payload, shard_names, write_ds

N = 240
BAD_SHARD = 2  # the shard whose bytes are flipped remotely


def _shard_ids(src: str) -> list[range]:
    """The global ids of each shard of ``src``, from its index."""
    with open(os.path.join(src, "index.json")) as f:
        counts = [int(e["samples"]) for e in json.load(f)["shards"]]
    out, at = [], 0
    for n in counts:
        out.append(range(at, at + n))
        at += n
    return out


def _flip_payload(path: str, li: int) -> None:
    """XOR 10 bytes inside the ``data`` payload of sample ``li`` of the shard at ``path``
    (its size and every offset stay the same)."""
    with open(path, "r+b") as f:
        data = bytearray(f.read())
        start = int.from_bytes(data[4 + 4 * li : 8 + 4 * li], "little")
        at = start + 4 + 8  # past the u32 length of ``data`` and 8 bytes into it
        for k in range(at, at + 10):
            data[k] ^= 0x5A
        f.seek(0)
        f.write(data)


class Remote:
    """The two uploaded copies and which samples the flipped shard holds."""

    def __init__(self, good: str, bad: str, victim_shard: str, ids: list[range]) -> None:
        self.good = good
        self.bad = bad
        self.victim_shard = victim_shard
        self.bad_ids = ids[BAD_SHARD]
        self.victim = ids[BAD_SHARD][len(ids[BAD_SHARD]) // 2]  # the sample whose bytes changed
        self.other = ids[0][3]  # a sample of an intact shard


@pytest.fixture(scope="module")
def remote(s3_bucket: str, tmp_path_factory: pytest.TempPathFactory) -> Remote:
    root = tmp_path_factory.mktemp("hashpaths")
    src = write_ds(str(root / "src"), N, hashes=["xxh64"])
    ids = _shard_ids(src)
    assert len(ids) > BAD_SHARD + 1
    good = f"{s3_bucket}/hp-good-{uuid.uuid4().hex[:8]}"
    upload(src, good)
    bad_src = str(root / "bad")
    shutil.copytree(src, bad_src)
    victim_shard = shard_names(bad_src)[BAD_SHARD]
    li = len(ids[BAD_SHARD]) // 2
    _flip_payload(os.path.join(bad_src, victim_shard), li)
    bad = f"{s3_bucket}/hp-bad-{uuid.uuid4().hex[:8]}"
    upload(bad_src, bad)
    return Remote(good, bad, victim_shard, ids)


def _ds(url: str, local: str, **kw: Any) -> StreamingDataset:
    """Every batch of an iteration may be read by ranges, whatever its shards' size, so that
    the iteration paths would take ranges too if ``validate_hash`` did not rule them out."""
    ds = StreamingDataset(remote=url, local=local, batch_size=4, range_first_batches=1000, **kw)
    ds.engine.range_min_bytes = 0
    return ds


def _check_one(s: dict[str, Any]) -> None:
    assert bytes(s["data"]) == payload(int(s["id"])), f"sample {s['id']}: wrong bytes"


# -- each read path: ``read(ds, remote)`` returns what it got, checked exact by the caller ------


def _getitem(ds: StreamingDataset, r: Remote) -> list[dict[str, Any]]:
    return [ds[r.other], ds[r.victim], ds[r.bad_ids[0]]]


def _iterate(ds: StreamingDataset, r: Remote) -> list[dict[str, Any]]:
    got = []
    for s in ds:  # every sample yielded before an error is checked by the caller
        _check_one(s)
        got.append(s)
    return got


def _aget(io: str) -> Callable[[StreamingDataset, Remote], list[dict[str, Any]]]:
    def read(ds: StreamingDataset, r: Remote) -> list[dict[str, Any]]:
        async def main() -> list[dict[str, Any]]:
            try:
                return [await ds.aget(r.other, io=io), await ds.aget(r.victim, io=io)]
            finally:
                await ds.aclose()

        return asyncio.run(main())

    return read


def _aget_many(ds: StreamingDataset, r: Remote) -> list[dict[str, Any]]:
    async def main() -> list[dict[str, Any]]:
        try:
            return await ds.aget_many([r.other, *r.bad_ids, r.victim], concurrency=4)
        finally:
            await ds.aclose()

    return asyncio.run(main())


def _batches(ds: StreamingDataset, r: Remote) -> list[dict[str, Any]]:
    got = []
    for b in ds.batches(ragged="offsets"):
        data, offs = b["data"], b["data_offsets"]
        for k, i in enumerate(b["id"]):
            s = {"id": int(i), "data": data[offs[k] : offs[k + 1]].tobytes()}
            _check_one(s)
            got.append(s)
    return got


def _loader(ds: StreamingDataset, r: Remote) -> list[dict[str, Any]]:
    got = []
    for b in StreamingDataLoader(ds, batch_size=4, num_workers=2, collate_fn=list):
        for s in b:
            _check_one(s)
            got.append(s)
    return got


PATHS: dict[str, Callable[[StreamingDataset, Remote], list[dict[str, Any]]]] = {
    "getitem": _getitem,
    "iterate": _iterate,
    "aget_thread": _aget("thread"),
    "aget_loop": _aget("loop"),
    "aget_many": _aget_many,
    "batches": _batches,
    "loader_2_workers": _loader,
}
WHOLE = {"iterate", "batches", "loader_2_workers"}  # paths that read the whole epoch


def test_the_flip_is_served_without_validate_hash(remote: Remote, tmp_path: Any) -> None:
    """The control: same size, so without a hash random access serves the flipped bytes."""
    s = _ds(remote.bad, str(tmp_path / "c"))[remote.victim]
    assert int(s["id"]) == remote.victim
    assert bytes(s["data"]) != payload(remote.victim)


@pytest.mark.parametrize("path", list(PATHS))
def test_corrupt_shard_raises_on_every_path(remote: Remote, tmp_path: Any, path: str) -> None:
    ds = _ds(remote.bad, str(tmp_path / "c"), validate_hash="xxh64")
    msg = rf"xxh64 of s3://.*/{remote.victim_shard} is [0-9a-f]{{16}}, index says"
    with pytest.raises(IntegrityError, match=msg):
        got = PATHS[path](ds, remote)
        for s in got:  # never reached for the whole bad shard's samples
            _check_one(s)
    assert not os.path.exists(os.path.join(str(tmp_path / "c"), remote.victim_shard))


@pytest.mark.parametrize("path", list(PATHS))
def test_intact_shards_are_exact_on_every_path(remote: Remote, tmp_path: Any, path: str) -> None:
    ds = _ds(remote.good, str(tmp_path / "c"), validate_hash="xxh64")
    got = PATHS[path](ds, remote)
    if path in WHOLE:
        check_samples(got, range(N))
    else:
        assert got
        for s in got:
            _check_one(s)


def test_stream_validate_hash_covers_random_access(remote: Remote, tmp_path: Any) -> None:
    """A stream's own ``validate_hash`` applies to ``ds[i]`` as the dataset's does."""
    st = Stream(remote=remote.bad, local=str(tmp_path / "c"), validate_hash="xxh64")
    ds = StreamingDataset(streams=[st], batch_size=4)
    assert int(ds[remote.other]["id"]) == remote.other
    with pytest.raises(IntegrityError, match=remote.victim_shard):
        ds[remote.victim]


def test_corrupt_cached_copy_is_refetched_by_random_access(remote: Remote, tmp_path: Any) -> None:
    """A cached shard flipped on disk: ``ds[i]`` detects it, fetches it again, serves exact."""
    local = str(tmp_path / "c")
    check_samples(list(_ds(remote.good, local)), range(N))
    name = shard_names(local)[BAD_SHARD]
    _flip_payload(os.path.join(local, name), len(remote.bad_ids) // 2)
    assert bytes(_ds(remote.good, local)[remote.victim]["data"]) != payload(remote.victim)
    s = _ds(remote.good, local, validate_hash="xxh64")[remote.victim]
    assert bytes(s["data"]) == payload(remote.victim)


def test_parquet_with_validate_hash_is_refused(tmp_path: Any) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = str(tmp_path / "table")
    os.makedirs(root)
    pq.write_table(pa.table({"id": list(range(10))}), os.path.join(root, "a.parquet"))
    with pytest.raises(ConfigError, match=r"validate_hash='xxh64'.*Parquet.*table"):
        StreamingDataset(local=root, format="parquet", validate_hash="xxh64", batch_size=2)
    st = Stream(local=root, format="parquet", validate_hash="xxh64")
    with pytest.raises(ConfigError, match=r"validate_hash='xxh64'.*Parquet"):
        StreamingDataset(streams=[st], batch_size=2)
