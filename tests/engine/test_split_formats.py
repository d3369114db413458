"""Streaming the reference's split formats (json, csv, tsv, xsv: a data file + a meta file per
shard) through the same engine and cache as MDS: local and S3, sync iteration, real DataLoader
workers, random access (range reads of the meta then the sample), compression, hashes.

The datasets are the reference's own (tests/golden/data/split/ and json/, csv/, tsv_zstd/,
written by mosaicml-streaming 0.13.0); every sample is compared with the generator's rows.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
sys.path.insert(0, str(GOLDEN))
import golden_samples as gs  # noqa: E402
import split_specs as ss  # noqa: E402

from astream import StreamingDataLoader, StreamingDataset  # noqa: E402
from astream.core.index import parse_index  # noqa: E402
from astream.errors import FormatError, IntegrityError, ObjectNotFoundError  # noqa: E402
from astream.runtime.range_costs import StoreCosts  # noqa: E402
from astream.storage.sync import upload  # noqa: E402

FIXTURES: dict[str, tuple[Path, list[dict[str, Any]]]] = {
    name: (GOLDEN / "data" / "split" / name, ss.samples_for(name)) for name in ss.SPECS
}
for _name in ("json", "csv", "tsv_zstd"):
    FIXTURES[_name] = (GOLDEN / "data" / _name, gs.samples_for(_name))


def _key(sample: dict[str, Any]) -> str:
    return json.dumps(sample, sort_keys=True)


def _same_multiset(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    assert len(got) == len(want)
    assert sorted(map(_key, got)) == sorted(map(_key, want))
    types = {k: type(v) for k, v in want[0].items()}
    for g in got:
        assert {k: type(v) for k, v in g.items()} == types


def _identity(batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return batch


def _copy(name: str, tmp_path: Path) -> str:
    dst = tmp_path / name
    shutil.copytree(FIXTURES[name][0], dst, ignore=shutil.ignore_patterns("get_config.json"))
    return str(dst)


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_local_in_order_and_random_access(name: str, tmp_path: Path) -> None:
    local = _copy(name, tmp_path)
    rows = FIXTURES[name][1]
    ds = StreamingDataset(local=local, batch_size=4)
    assert len(ds) == len(rows)
    assert list(ds) == rows  # unshuffled, one rank: the written order
    assert [ds[i] for i in range(len(rows))] == rows
    assert ds[-1] == rows[-1]
    with pytest.raises(IndexError, match=f"out of range for {len(rows)} samples"):
        ds[len(rows)]


@pytest.mark.parametrize("name", ["json_zstd", "csv_hashes", "xsv_multi_snappy"])
def test_local_shuffled_with_dataloader_workers(name: str, tmp_path: Path) -> None:
    local = _copy(name, tmp_path)
    rows = FIXTURES[name][1]
    for workers in (0, 2):
        ds = StreamingDataset(local=local, batch_size=3, shuffle=True, shuffle_seed=7)
        loader = StreamingDataLoader(ds, batch_size=3, num_workers=workers, collate_fn=_identity)
        got = [s for batch in loader for s in batch]
        _same_multiset(got, rows)
        assert got != rows  # shuffled


@pytest.fixture(scope="module")
def s3_split(s3_bucket: str) -> dict[str, str]:
    """Every fixture uploaded once to the S3 emulator: name -> URL."""
    urls = {}
    tag = uuid.uuid4().hex[:8]
    for name, (path, _) in FIXTURES.items():
        url = f"{s3_bucket}/split-{tag}/{name}"
        upload(str(path), url)
        urls[name] = url
    return urls


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_s3_dataloader_0_and_2_workers(name: str, s3_split: Any, tmp_path: Path) -> None:
    rows = FIXTURES[name][1]
    for workers in (0, 2):
        ds = StreamingDataset(
            remote=s3_split[name],
            local=str(tmp_path / f"cache{workers}"),
            batch_size=4,
            shuffle=True,
        )
        loader = StreamingDataLoader(ds, batch_size=4, num_workers=workers, collate_fn=_identity)
        got = [s for batch in loader for s in batch]
        _same_multiset(got, rows)


def test_s3_cache_holds_the_reference_files(s3_split: Any, tmp_path: Path) -> None:
    """Compressed shards: both files fetched, inflated; the cache holds the raw data and meta
    files (keep_zip=True: the compressed ones too), and a second pass reads only the cache."""
    name = "tsv_br"
    local = tmp_path / "c"
    ds = StreamingDataset(remote=s3_split[name], local=str(local), batch_size=2, keep_zip=True,
                          validate_hash="blake2b")  # fmt: skip
    assert list(ds) == FIXTURES[name][1]
    index = parse_index((local / "index.json").read_bytes(), "i")
    want = set()
    for e in index.shards:
        for info in (e.raw_data, e.zip_data, e.raw_meta, e.zip_meta):
            assert info is not None
            want.add(info.basename)
    assert {p for p in os.listdir(local) if p.startswith("shard.")} == want
    for e in index.shards:  # the inflated copies are the reference's raw files
        assert (local / e.raw_data.basename).stat().st_size == e.raw_data.bytes
        assert (local / e.raw_meta.basename).stat().st_size == e.raw_meta.bytes  # type: ignore[union-attr]
    assert ds.stats.shards_fetched == 2 * len(index.shards)  # a data and a meta file each
    again = StreamingDataset(remote=s3_split[name], local=str(local), batch_size=2)
    assert list(again) == FIXTURES[name][1]
    assert again.stats.shards_fetched == 0


def test_tight_cache_limit_evicts_meta_files_too(s3_split: Any, tmp_path: Path) -> None:
    """Meta files are cache files like any other: counted, and evicted when room is needed
    (were they never evicted, they would fill this limit by the fourth shard)."""
    name = "json_plain"  # 5 shards; the largest is 688 + 227 bytes
    local = tmp_path / "c"
    ds = StreamingDataset(remote=s3_split[name], local=str(local), batch_size=2,
                          cache_limit=1400)  # fmt: skip
    assert list(ds) == FIXTURES[name][1]
    files = [p for p in os.listdir(local) if p.startswith("shard.")]
    assert sum((local / p).stat().st_size for p in files) <= 1400
    assert "shard.00000.json.meta" not in files


def test_s3_random_access_reads_meta_header_and_one_line(
    s3_split: Any, s3_server: Any, make_proxy: Any, tmp_path: Path
) -> None:
    name = "xsv_pipe"  # uncompressed: samples are addressable inside the remote data file
    rows = FIXTURES[name][1]
    proxy = make_proxy(s3_server.url, bandwidth=200)  # bytes/s: a whole shard costs ~1.5 s
    local = tmp_path / "c"
    ds = StreamingDataset(remote=s3_split[name], local=str(local), batch_size=4,
                          storage_options={"endpoint_url": proxy.url})  # fmt: skip
    i = len(rows) - 3
    s, li = ds.catalog.locate_one(i)
    entry = ds.shards[s]
    # the store as already measured at the proxy's bandwidth: the shard whole then costs far
    # more than the three ranged reads below, so the rent-or-buy rule never buys it here (the
    # rule itself: tests/engine/test_random_promotion.py)
    costs = StoreCosts()
    costs.latency, costs.bandwidth = 0.001, 200.0
    costs._latency_seen = costs._bandwidth_seen = True
    ds.engine._parts().costs[ds.catalog.shards[s].remote] = costs
    proxy.reset_stats()
    assert ds[i] == rows[i]
    # two GETs: the meta file's header (count + offsets), then exactly the sample's line
    assert proxy.stats.total_requests == 2
    line = len(("|".join(str(rows[i][c]) for c in ("id", "name", "score")) + "\n").encode())
    assert proxy.stats.total_bytes == 4 * (entry.samples + 2) + line
    assert not (local / entry.raw_data.basename).exists()
    proxy.reset_stats()
    assert ds[i] == rows[i]  # kept in memory: no request
    assert proxy.stats.total_requests == 0
    j = i - 1 if li > 0 else i + 1
    assert ds[j] == rows[j]
    assert proxy.stats.total_requests == 1  # the offsets are remembered
    assert s not in ds.engine._parts().bought


def test_meta_evicted_is_fetched_again(s3_split: Any, tmp_path: Path) -> None:
    """A cached data file whose meta file is gone (evicted, deleted): the reader fetches the
    meta file again instead of failing."""
    name = "csv_hashes"
    local = tmp_path / "c"
    url = s3_split[name]
    assert list(StreamingDataset(remote=url, local=str(local), batch_size=2)) == FIXTURES[name][1]
    metas = sorted(p for p in os.listdir(local) if p.endswith(".meta"))
    assert len(metas) == 3
    for m in metas:
        os.unlink(local / m)
    again = StreamingDataset(remote=url, local=str(local), batch_size=2, validate_hash="sha256")
    assert list(again) == FIXTURES[name][1]
    assert sorted(p for p in os.listdir(local) if p.endswith(".meta")) == metas


def test_corrupt_cached_meta_is_dropped_and_refetched(s3_split: Any, tmp_path: Path) -> None:
    name = "json_plain"
    local = tmp_path / "c"
    url = s3_split[name]
    rows = FIXTURES[name][1]
    assert list(StreamingDataset(remote=url, local=str(local), batch_size=2)) == rows
    meta = local / "shard.00001.json.meta"
    data = bytearray(meta.read_bytes())
    data[8], data[12] = data[12], data[8]  # two offsets swapped: out of order
    meta.write_bytes(bytes(data))
    again = StreamingDataset(remote=url, local=str(local), batch_size=2)
    assert list(again) == rows
    assert meta.read_bytes() == (FIXTURES[name][0] / "shard.00001.json.meta").read_bytes()


def test_local_only_errors_name_the_file(tmp_path: Path) -> None:
    local = _copy("xsv_pipe", tmp_path)
    meta = os.path.join(local, "shard.00001.xsv.meta")
    data = bytearray(Path(meta).read_bytes())
    data[8:12] = (10**6).to_bytes(4, "little")  # an offset past the data file
    with open(meta, "wb") as f:
        f.write(bytes(data))
    ds = StreamingDataset(local=local, batch_size=4)
    with pytest.raises(FormatError, match=r"shard\.00001\.xsv\.meta: sample offsets out of order"):
        list(ds)
    os.unlink(meta)
    ds = StreamingDataset(local=local, batch_size=4)
    with pytest.raises(ObjectNotFoundError, match=r"shard\.00001\.xsv\.meta"):
        list(ds)


def test_local_only_hash_mismatch_of_meta(tmp_path: Path) -> None:
    local = _copy("csv_hashes", tmp_path)
    meta = os.path.join(local, "shard.00000.csv.meta")
    data = bytearray(Path(meta).read_bytes())
    data[-2] ^= 1  # inside the config JSON: the structure still parses, the hash does not match
    with open(meta, "wb") as f:
        f.write(bytes(data))
    with pytest.raises(IntegrityError, match=r"sha256 of the cached meta file .*shard\.00000"):
        list(StreamingDataset(local=local, batch_size=4, validate_hash="sha256"))


def test_mixed_mds_and_split_streams(tmp_path: Path) -> None:
    from astream import Stream

    from .conftest import write_dataset

    mds = str(tmp_path / "mds")
    mds_rows = write_dataset(mds, 50, size_limit=2000)
    csv = _copy("csv_bz2", tmp_path)
    ds = StreamingDataset(streams=[Stream(local=mds), Stream(local=csv)], batch_size=5)
    got = list(ds)
    assert [s["label"] for s in got[:50]] == [r["label"] for r in mds_rows]
    assert got[50:] == FIXTURES["csv_bz2"][1]


def test_aiter_and_aget_on_the_callers_loop(s3_split: Any, tmp_path: Path) -> None:
    import asyncio

    from astream.aio import AsyncStreamingDataset

    name = "json_zstd"
    rows = FIXTURES[name][1]
    ds = AsyncStreamingDataset(remote=s3_split[name], local=str(tmp_path / "c"), batch_size=4)

    async def main() -> tuple[list[dict[str, Any]], dict[str, Any]]:
        got = [s async for s in ds.aiter()]
        one = await ds.aget(17)
        await ds.aclose()
        return got, one

    got, one = asyncio.run(main())
    assert got == rows and one == rows[17]


def test_meta_whose_offsets_stop_short_of_the_data_file(tmp_path: Path) -> None:
    """The last offset must be the data file's size (LocalDataset and streaming alike)."""
    from astream.local import LocalDataset

    local = _copy("csv_hashes", tmp_path)
    meta = Path(local) / "shard.00002.csv.meta"
    data = bytearray(meta.read_bytes())
    n = int.from_bytes(data[:4], "little")
    last = int.from_bytes(data[4 + 4 * n : 8 + 4 * n], "little")
    data[4 + 4 * n : 8 + 4 * n] = (last - 1).to_bytes(4, "little")
    meta.write_bytes(bytes(data))
    msg = rf"shard\.00002\.csv\.meta: last sample offset {last - 1} does not match file size {last}"
    with pytest.raises(FormatError, match=msg):
        list(LocalDataset(local))
    with pytest.raises(FormatError, match=msg):
        list(StreamingDataset(local=local, batch_size=4))


def test_meta_config_disagreeing_with_the_index(tmp_path: Path) -> None:
    from astream.local import LocalDataset

    local = _copy("xsv_pipe", tmp_path)
    meta = Path(local) / "shard.00000.xsv.meta"
    data = meta.read_bytes()
    assert data.count(b'"separator": "|"') == 1
    meta.write_bytes(data.replace(b'"separator": "|"', b'"separator": ";"'))  # same size
    msg = r"shard\.00000\.xsv\.meta: meta file config separator ';' differs from the index '\|'"
    with pytest.raises(FormatError, match=msg):
        LocalDataset(local)[0]
    with pytest.raises(FormatError, match=msg):
        list(StreamingDataset(local=local, batch_size=4))
