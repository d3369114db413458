"""astream against datasets written by mosaicml-streaming 0.13.0 (committed under data/).

Reading: every fixture returns exactly the generator's samples, types included. Writing: for
every deterministic configuration astream's MDSWriter (and merge_index) reproduces every file,
index.json included, byte for byte.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import golden_samples as gs

from astream.core.compression import decompress
from astream.core.index import parse_index
from astream.errors import UnsafeEncodingError
from astream.local import LocalDataset
from astream.writer.mds import MDSWriter
from astream.writer.merge import merge_index

DATA = Path(__file__).resolve().parent / "data"
MDS_FIXTURES = [n for n, s in gs.SPECS.items() if s.get("writer", "mds") == "mds"]
SPLIT_FIXTURES = [n for n, s in gs.SPECS.items() if s.get("writer", "mds") != "mds"]


def _expected(name: str) -> list[dict[str, object]]:
    spec = gs.SPECS[name]
    cols = spec["columns"]
    rows = gs.samples_for(name)
    if spec.get("writer", "mds") != "mds":
        return rows
    return [{c: gs.expected_value(cols[c], r[c]) for c in cols} for r in rows]


def _check_rows(got: list[dict[str, object]], want: list[dict[str, object]]) -> None:
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert sorted(g) == sorted(w), i
        for col in w:
            gs.assert_same(g[col], w[col], f"sample {i} column {col}")


@pytest.mark.parametrize("name", MDS_FIXTURES + SPLIT_FIXTURES)
def test_reads_reference_dataset(name: str) -> None:
    ds = LocalDataset(str(DATA / name), allow_unsafe_types=True)
    want = _expected(name)
    assert len(ds) == len(want)
    _check_rows(list(ds), want)
    _check_rows([ds[i] for i in range(len(ds))], want)  # random access path


def test_reads_merged_dataset_and_split() -> None:
    want = _expected("merged/part0") + _expected("merged/part1")
    ds = LocalDataset(str(DATA), split="merged")
    assert [s.raw_data.basename for s in ds.shards][:2] == [
        "part0/shard.00000.mds",
        "part0/shard.00001.mds",
    ]
    _check_rows(list(ds), want)
    _check_rows(ds[-3:], want[-3:])


def test_reference_empty_first_shard_is_read() -> None:
    ds = LocalDataset(str(DATA / "oversized_first"))
    assert [s.samples for s in ds.shards] == [0] + [1] * 10
    assert ds[0]["tokens"].tolist() == list(range(400))


def test_pkl_fixture_refused_without_allow_unsafe_types() -> None:
    unsafe = r"column 'obj_pkl' contains an unsafe type: encoding 'pkl'"
    with pytest.raises(UnsafeEncodingError, match=unsafe):
        LocalDataset(str(DATA / "encodings"))


def _write_like(name: str, out: Path) -> None:
    spec = gs.SPECS[name]
    with MDSWriter(
        out=str(out),
        columns=spec["columns"],
        compression=spec["compression"],
        hashes=spec["hashes"],
        size_limit=spec["size_limit"],
    ) as w:
        for row in gs.samples_for(name):
            w.write(row)


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


BYTE_IDENTICAL = [n for n in MDS_FIXTURES if not n.startswith(("gz", "oversized", "merged"))]


@pytest.mark.parametrize("name", BYTE_IDENTICAL)
def test_writer_is_byte_identical(name: str, tmp_path: Path) -> None:
    _write_like(name, tmp_path / "out")
    ours, ref = _files(tmp_path / "out"), _files(DATA / name)
    assert sorted(ours) == sorted(ref)
    for rel in ref:
        assert ours[rel] == ref[rel], rel


def test_gz_identical_except_compressed_bytes(tmp_path: Path) -> None:
    _write_like("gz_1", tmp_path / "out")
    ours = parse_index((tmp_path / "out/index.json").read_bytes(), "ours")
    ref = parse_index((DATA / "gz_1/index.json").read_bytes(), "ref")
    assert [s.raw_data for s in ours.shards] == [s.raw_data for s in ref.shards]
    for s in ref.shards:
        assert s.zip_data is not None
        a = decompress("gz:1", (tmp_path / "out" / s.zip_data.basename).read_bytes())
        b = decompress("gz:1", (DATA / "gz_1" / s.zip_data.basename).read_bytes())
        assert a == b and len(a) == s.raw_data.bytes


def test_oversized_first_sample_gets_own_shard_not_empty(tmp_path: Path) -> None:
    _write_like("oversized_first", tmp_path / "out")
    ours = parse_index((tmp_path / "out/index.json").read_bytes(), "ours")
    assert [s.samples for s in ours.shards] == [1] * 10
    ref = _files(DATA / "oversized_first")
    # every non-empty reference shard is reproduced, shifted down by the missing empty one
    for i in range(10):
        ours_shard = (tmp_path / "out" / f"shard.{i:05d}.mds").read_bytes()
        assert ours_shard == ref[f"shard.{i + 1:05d}.mds"]


def test_merge_index_is_byte_identical(tmp_path: Path) -> None:
    root = tmp_path / "merged"
    for part in gs.MERGED_PARTS:
        _write_like(part, tmp_path / part)
    merge_index(str(root))
    ours, ref = _files(root), _files(DATA / "merged")
    assert sorted(ours) == sorted(ref)
    for rel in ref:
        assert ours[rel] == ref[rel], rel


def test_merge_index_list_form(tmp_path: Path) -> None:
    parts = [str(DATA / p / "index.json") for p in gs.MERGED_PARTS]
    merge_index(parts + parts[:1], str(tmp_path))  # duplicates are dropped
    assert (tmp_path / "index.json").read_bytes() == (DATA / "merged/index.json").read_bytes()


def test_arrays_are_read_only_numpy_scalars_typed() -> None:
    ds = LocalDataset(str(DATA / "encodings"), allow_unsafe_types=True)
    s = ds[3]
    assert type(s["s_float16"]) is np.float16 and type(s["a_int"]) is int
    assert not s["nd_dyn"].flags.writeable and s["nd_fixed"].shape == (2, 3)
    assert os.path.basename(ds.shards[3].raw_data.basename) == "shard.00003.mds"
