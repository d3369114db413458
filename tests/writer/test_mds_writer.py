"""MDSWriter and LocalDataset together: sizing, sinks, atomicity, arguments, indexing forms."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from astream.core.compression import decompress
from astream.core.index import parse_index
from astream.core.shard import parse_offsets
from astream.errors import ConfigError
from astream.local import LocalDataset
from astream.writer.mds import MDSWriter

COLS = {"ids": "ndarray:int32", "label": "int", "name": "str"}


def _rows(n: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    return [
        {"ids": rng.integers(0, 1000, int(rng.integers(1, 40)), dtype=np.int32), "label": i,
         "name": f"n{i}"}
        for i in range(n)
    ]  # fmt: skip


def _same(got: dict[str, Any], want: dict[str, Any]) -> None:
    assert got["label"] == want["label"] and got["name"] == want["name"]
    assert got["ids"].tobytes() == want["ids"].tobytes() and got["ids"].dtype == np.int32


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    lengths=st.lists(st.integers(1, 300), min_size=1, max_size=40),
    limit=st.integers(300, 3000),
    comp=st.sampled_from([None, "zstd", "snappy"]),
)
def test_random_samples_roundtrip_and_size_limit(
    tmp_path: Path, lengths: list[int], limit: int, comp: str | None
) -> None:
    out = tmp_path / f"d{abs(hash((tuple(lengths), limit, comp)))}"
    rows = [{"ids": np.arange(n, dtype=np.int32), "label": -n, "name": "x" * (n % 7)}
            for n in lengths]  # fmt: skip
    with MDSWriter(out=str(out), columns=COLS, size_limit=limit, compression=comp) as w:
        for r in rows:
            w.write(r)
    ds = LocalDataset(str(out))
    assert len(ds) == len(rows)
    for got, want in zip(ds, rows):
        _same(got, want)
    index = parse_index((out / "index.json").read_bytes(), "i")
    assert sum(s.samples for s in index.shards) == len(rows)
    firsts = []
    for s in index.shards:
        assert s.samples >= 1  # never an empty shard
        raw = decompress(comp, (out / s.remote_basename).read_bytes(), s.raw_data.bytes)
        offsets = parse_offsets(raw, "s", s.samples, len(raw))
        firsts.append(int(offsets[1] - offsets[0]))
    for k, s in enumerate(index.shards):
        # the running size the writer tracks (8 + config + sum(len + 4)) is the file size
        if s.samples > 1:
            assert s.raw_data.bytes <= limit
        if k + 1 < len(index.shards):  # ... and a shard is only cut when the next sample overflows
            assert s.raw_data.bytes + firsts[k + 1] + 4 > limit


def test_lone_oversized_samples_get_their_own_shards(tmp_path: Path) -> None:
    rows = [{"ids": np.zeros(n, np.int32), "label": 0, "name": ""} for n in (500, 2, 500, 2, 2)]
    with MDSWriter(out=str(tmp_path / "o"), columns=COLS, size_limit=600) as w:
        for r in rows:
            w.write(r)
    index = parse_index((tmp_path / "o/index.json").read_bytes(), "i")
    assert [s.samples for s in index.shards] == [1, 1, 1, 2]


def test_exist_ok(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("x")
    with pytest.raises(ConfigError) as info:
        MDSWriter(out=str(out), columns=COLS)
    assert str(info.value) == (
        f"out: {str(out)!r}: Directory is not empty; pass exist_ok=True to overwrite it"
    )
    with MDSWriter(out=str(out), columns=COLS, exist_ok=True) as w:
        w.write(_rows(1)[0])
    assert sorted(os.listdir(out)) == ["index.json", "shard.00000.mds"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"compression": "zip"}, "compression: unknown algorithm 'zip'"),
        ({"hashes": ["sha1", "nope"]}, "hashes: unsupported hash algorithm 'nope'"),
        ({"hashes": "sha1"}, "hashes must be a list of names, got the string 'sha1'"),
        ({"size_limit": "12 apples"}, "size_limit: cannot parse size '12 apples'"),
        (
            {"size_limit": 1 << 32},
            "`size_limit` must be less than 2**32 and not negative (u32 offsets), got 4294967296",
        ),
        ({"columns": {"a": "uint9"}}, "columns['a']: unknown encoding 'uint9'"),
        ({"columns": {}}, "columns must be a non-empty dict"),
        (
            {"bogus": 1},
            "Invalid Writer argument(s) for MDSWriter: ['bogus'] (unknown argument names)",
        ),
        ({"out": ("a",)}, "out: a tuple must be (local_dir, remote_url)"),
    ],
)
def test_bad_arguments(tmp_path: Path, kwargs: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = {"out": str(tmp_path / "o"), "columns": COLS, **kwargs}
    with pytest.raises(ConfigError) as info:
        MDSWriter(**args)
    assert str(info.value).startswith(message)


def test_bad_sample_names_the_column(tmp_path: Path) -> None:
    with MDSWriter(out=str(tmp_path / "o"), columns=COLS) as w:
        with pytest.raises(ConfigError, match=r"^sample is missing column 'label'$"):
            w.write({"ids": np.zeros(2, np.int32), "name": ""})
        with pytest.raises(
            ConfigError, match=r"^column 'ids': encoding 'ndarray:int32': wrong dtype"
        ):
            w.write({"ids": np.zeros(2, np.int64), "label": 1, "name": ""})
        w.write(_rows(1)[0])
    with pytest.raises(ConfigError, match=r"^MDSWriter: write\(\) after finish\(\)$"):
        w.write(_rows(1)[0])


def test_error_inside_with_leaves_no_index(tmp_path: Path) -> None:
    out = tmp_path / "o"
    with pytest.raises(RuntimeError), MDSWriter(out=str(out), columns=COLS, size_limit=200) as w:
        for r in _rows(20):
            w.write(r)
        raise RuntimeError("boom")
    names = os.listdir(out)
    assert "index.json" not in names and names  # shards flushed so far, no index
    assert not [n for n in names if n.startswith(".")]  # no temp files left


class RecordingSink:
    def __init__(self, remote: str, local: str, keep_local: bool) -> None:
        self.args = (remote, local, keep_local)
        self.calls: list[tuple[str, ...]] = []

    def shard_done(self, path: str, key: str) -> None:
        assert os.path.isfile(path)
        self.calls.append(("shard_done", os.path.basename(path), key))

    def check(self) -> None:
        self.calls.append(("check",))

    def finish(self, index_path: str) -> None:
        with open(index_path, "rb") as f:
            parse_index(f.read(), index_path)
        self.calls.append(("finish", os.path.basename(index_path)))

    def close(self) -> None:
        self.calls.append(("close",))


def test_remote_out_uses_the_sink(tmp_path: Path) -> None:
    sinks: list[RecordingSink] = []

    def factory(remote: str, local: str, keep_local: bool) -> RecordingSink:
        sinks.append(RecordingSink(remote, local, keep_local))
        return sinks[-1]

    out = (str(tmp_path / "loc"), "s3://bucket/ds")
    with MDSWriter(out=out, columns=COLS, compression="zstd", size_limit=300,
                   sink_factory=factory, keep_local=True) as w:  # fmt: skip
        for r in _rows(6):
            w.write(r)
    (sink,) = sinks
    assert sink.args == ("s3://bucket/ds", str(tmp_path / "loc"), True)
    done = [c for c in sink.calls if c[0] == "shard_done"]
    assert done and all(c[1] == c[2] and c[1].endswith(".mds.zstd") for c in done)
    assert sink.calls[-2:] == [("finish", "index.json"), ("close",)]
    assert sink.calls.count(("check",)) == 6


def test_remote_temp_dir_removed_without_keep_local(tmp_path: Path) -> None:
    seen: list[str] = []

    def factory(remote: str, local: str, keep_local: bool) -> RecordingSink:
        seen.append(local)
        return RecordingSink(remote, local, keep_local)

    with MDSWriter(out="gs://b/x", columns=COLS, sink_factory=factory) as w:
        w.write(_rows(1)[0])
    assert seen and not os.path.exists(seen[0])


def test_local_dataset_indexing_forms(tmp_path: Path) -> None:
    rows = _rows(30, seed=3)
    with MDSWriter(out=str(tmp_path / "o"), columns=COLS, size_limit=400, compression="br:1") as w:
        for r in rows:
            w.write(r)
    ds = LocalDataset(str(tmp_path / "o"), cache_bytes=1)
    assert len(ds) == 30 and ds.size == 30 and len(ds.shards) > 3
    _same(ds[-1], rows[-1])
    _same(ds[np.int64(5)], rows[5])
    assert [r["label"] for r in ds[2:9:3]] == [2, 5, 8]
    assert [r["label"] for r in ds[[0, -2, 7]]] == [0, 28, 7]
    assert [r["label"] for r in ds[np.array([4, 1])]] == [4, 1]
    with pytest.raises(IndexError, match=r"^sample index 30 out of range for 30 samples$"):
        ds[30]
    with pytest.raises(TypeError):
        ds["x"]
    clone = pickle.loads(pickle.dumps(ds))
    _same(clone[11], rows[11])
    assert len(ds._lru) == 1  # the decompressed-shard cache stays within its bound


def test_local_dataset_missing_files(tmp_path: Path) -> None:
    from astream.errors import ObjectNotFoundError

    with pytest.raises(ObjectNotFoundError, match=r"no index.json"):
        LocalDataset(str(tmp_path))
    with MDSWriter(out=str(tmp_path / "o"), columns=COLS) as w:
        w.write(_rows(1)[0])
    os.remove(tmp_path / "o/shard.00000.mds")
    ds = LocalDataset(str(tmp_path / "o"))
    with pytest.raises(ObjectNotFoundError, match=r"shard file missing"):
        ds[0]
