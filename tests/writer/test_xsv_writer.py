"""JSONWriter / CSVWriter / TSVWriter / XSVWriter against the reference's output, and
get_config of every writer (MDSWriter included) against the reference's.

The golden datasets under tests/golden/data/split/ (and json/, csv/, tsv_zstd/ beside the MDS
ones) were written by mosaicml-streaming 0.13.0 (scripts/gen_golden_xsv.py, gen_golden.py).
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
sys.path.insert(0, str(GOLDEN))
import golden_samples as gs  # noqa: E402
import split_specs as ss  # noqa: E402

import astream  # noqa: E402
import astream.writer  # noqa: E402
from astream.errors import ConfigError, OutputExistsError, UnsupportedEncodingError  # noqa: E402
from astream.local import LocalDataset  # noqa: E402
from astream.writer import CSVWriter, JSONWriter, MDSWriter, TSVWriter, XSVWriter  # noqa: E402

SPLIT = GOLDEN / "data" / "split"
WRITERS: dict[str, Any] = {"json": JSONWriter, "csv": CSVWriter, "tsv": TSVWriter, "xsv": XSVWriter}
REF_CONFIGS = json.loads((SPLIT / "get_config.json").read_text())

# (fixture dir, writer name, columns, writer kwargs, rows)
CASES: dict[str, tuple[Path, str, dict[str, str], dict[str, Any], list[dict[str, Any]]]] = {
    name: (SPLIT / name, spec["writer"], spec["columns"], spec["kwargs"], ss.samples_for(name))
    for name, spec in ss.SPECS.items()
}
for _name in ("json", "csv", "tsv_zstd"):  # the older fixtures of gen_golden.py
    _spec = gs.SPECS[_name]
    CASES[_name] = (
        GOLDEN / "data" / _name,
        _spec["writer"],
        _spec["columns"],
        {k: _spec[k] for k in ("compression", "hashes", "size_limit")},
        gs.samples_for(_name),
    )


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "get_config.json"
    }


def _write(name: str, out: Any, **extra: Any) -> Any:
    _, writer, columns, kwargs, rows = CASES[name]
    with WRITERS[writer](out=out, columns=columns, **kwargs, **extra) as w:
        for row in rows:
            w.write(row)
    return w


def test_exported_from_astream_and_astream_writer() -> None:
    for name in ("JSONWriter", "CSVWriter", "TSVWriter", "XSVWriter"):
        assert getattr(astream, name) is getattr(astream.writer, name)
        assert name in astream.__all__ and name in astream.writer.__all__


@pytest.mark.parametrize("name", sorted(CASES))
def test_byte_identical_to_reference(name: str, tmp_path: Path) -> None:
    ref_dir = CASES[name][0]
    _write(name, str(tmp_path / "out"))
    ours, ref = _files(tmp_path / "out"), _files(ref_dir)
    assert sorted(ours) == sorted(ref)
    for rel in ref:
        assert ours[rel] == ref[rel], rel


@pytest.mark.parametrize("name", sorted(CASES))
def test_written_dataset_reads_back_exactly(name: str, tmp_path: Path) -> None:
    _write(name, str(tmp_path / "out"))
    rows = CASES[name][4]
    ds = LocalDataset(str(tmp_path / "out"))
    got = list(ds)
    assert got == rows
    for g, w in zip(got, rows):
        assert {k: type(v) for k, v in g.items()} == {k: type(v) for k, v in w.items()}


@pytest.mark.parametrize("name", sorted(ss.SPECS))
def test_get_config_is_the_references(name: str, tmp_path: Path) -> None:
    w = _write(name, str(tmp_path / "out"))
    # same keys, same values, same key order (the reference's dict is ordered too)
    assert list(w.get_config().items()) == list(REF_CONFIGS[name].items())


def test_mds_get_config_is_the_references(tmp_path: Path) -> None:
    cols = {"tokens": "ndarray:uint16", "text": "str", "label": "int", "img": "jpeg"}
    with MDSWriter(out=str(tmp_path / "m"), columns=cols, compression="zstd:7",
                   hashes=["md5", "sha1"], size_limit="1kb") as w:  # fmt: skip
        got = w.get_config()
    assert list(got.items()) == list(REF_CONFIGS["mds"].items())
    got["column_names"].append("x")  # a copy: the writer's own state is untouched
    assert w.get_config()["column_names"] == ["img", "label", "text", "tokens"]


def test_first_sample_over_the_limit_gets_its_own_shard(tmp_path: Path) -> None:
    rows = [{"id": i, "name": "n" * (50 if i == 0 else 1), "score": 1.0} for i in range(3)]
    with JSONWriter(out=str(tmp_path / "o"), columns=ss.ROWS_COLUMNS, size_limit=80) as w:
        for r in rows:
            w.write(r)
    assert [s.samples for s in w.shards] == [1, 2]  # the reference: [0, 1, 2]
    assert list(LocalDataset(str(tmp_path / "o"))) == rows


def test_a_shard_may_reach_the_limit_exactly(tmp_path: Path) -> None:
    rows = [{"id": i, "name": "n", "score": 1.0} for i in range(5)]
    line = len(b'{"id": 0, "name": "n", "score": 1.0}\n')
    # csv: the header line does not count towards the limit (as in the reference)
    with JSONWriter(out=str(tmp_path / "j"), columns=ss.ROWS_COLUMNS, size_limit=2 * line) as w:
        for r in rows:
            w.write(r)
    assert [s.samples for s in w.shards] == [2, 2, 1]
    assert [s.raw_data.bytes for s in w.shards] == [2 * line, 2 * line, line]
    with CSVWriter(
        out=str(tmp_path / "c"), columns=ss.ROWS_COLUMNS, size_limit=len("0,n,1.0\n") * 2
    ) as w:
        for r in rows:
            w.write(r)
    assert [s.samples for s in w.shards] == [2, 2, 1]


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda o: JSONWriter(out=o, columns={"a": "bytes"}), UnsupportedEncodingError,
         r"JSONWriter: columns\['a'\]: unknown encoding 'bytes'"),
        (lambda o: CSVWriter(out=o, columns={}), ConfigError, "CSVWriter: columns must be"),
        (lambda o: JSONWriter(out=o, columns={"a": "int"}, newline="|"), ConfigError,
         "JSONWriter: newline must be JSON whitespace"),
        (lambda o: XSVWriter(out=o, columns={"a": "int"}, separator=""), ConfigError,
         "XSVWriter: separator must be a non-empty string"),
        (lambda o: XSVWriter(out=o, columns={"a": "int"}, separator="\n"), ConfigError,
         "XSVWriter: separator '\\\\n' and newline '\\\\n' overlap"),
        (lambda o: TSVWriter(out=o, columns={"a b\tc": "int"}), ConfigError,
         r"TSVWriter: column name 'a b\\tc' contains the separator"),
        (lambda o: CSVWriter(out=o, columns={"a": "int"}, separator=";"), ConfigError,
         "CSVWriter: separator is always ','"),
        (lambda o: CSVWriter(out=o, columns={"a": "int"}, bogus=1), ConfigError,
         r"^Invalid Writer argument\(s\) for CSVWriter: \['bogus'\] \(unknown argument names\)$"),
        (lambda o: JSONWriter(out=o, columns={"a": "int"}, progress_bar=1), ConfigError,
         "progress_bar must be True or False, got 1"),
        (lambda o: JSONWriter(out=o, columns={"a": "int"}, compression="lzma"), ConfigError,
         "lzma"),
        (lambda o: CSVWriter(out=o, columns={"a": "int"}, size_limit=1 << 32), ConfigError,
         r"^`size_limit` must be less than 2\*\*32 and not negative"),
    ],
)  # fmt: skip
def test_bad_arguments(make: Any, error: type, message: str, tmp_path: Path) -> None:
    with pytest.raises(error, match=message):
        make(str(tmp_path / "o"))


@pytest.mark.parametrize(
    ("cls", "sample", "message"),
    [
        (CSVWriter, {"id": 1, "name": "a,b", "score": 1.0},
         r"column 'name': value 'a,b' contains the separator ','"),
        (TSVWriter, {"id": 1, "name": "a\nb", "score": 1.0},
         r"column 'name': value 'a\\nb' contains the separator '\\t' or the newline '\\n'"),
        (CSVWriter, {"id": True, "name": "a", "score": 1.0},
         "column 'id': expected int, got bool True"),
        (CSVWriter, {"id": 1, "name": "a", "score": 1}, "column 'score': expected float, got int"),
        (JSONWriter, {"id": "1", "name": "a", "score": 1.0},
         "column 'id': expected int, got str '1'"),
        (JSONWriter, {"id": 1, "score": 1.0}, "sample is missing column 'name'"),
        (XSVWriter, [1, 2], "sample must be a dict, got list"),
    ],
)  # fmt: skip
def test_bad_sample_names_the_column(cls: Any, sample: Any, message: str, tmp_path: Path) -> None:
    kw = {"separator": "|"} if cls is XSVWriter else {}
    w = cls(out=str(tmp_path / "o"), columns=ss.ROWS_COLUMNS, **kw)
    w.write({"id": 0, "name": "ok", "score": 0.5})
    with pytest.raises(ConfigError, match=message):
        w.write(sample)
    w.finish()  # the bad sample left nothing behind
    assert list(LocalDataset(str(tmp_path / "o"))) == [{"id": 0, "name": "ok", "score": 0.5}]
    with pytest.raises(ConfigError, match="write\\(\\) after finish\\(\\)"):
        w.write({"id": 0, "name": "ok", "score": 0.5})


def test_json_accepts_what_json_encodes(tmp_path: Path) -> None:
    rows = [{"a": 'x\ny,\t|"', "b": True, "c": float("inf")}, {"a": "", "b": -1, "c": -0.0}]
    with JSONWriter(out=str(tmp_path / "o"), columns={"a": "str", "b": "int", "c": "float"},
                    newline=" \r\n") as w:  # fmt: skip
        for r in rows:
            w.write({**r, "extra": "ignored"})
    got = list(LocalDataset(str(tmp_path / "o")))
    assert got == rows and type(got[0]["b"]) is bool


def test_exist_ok_and_error_inside_with(tmp_path: Path) -> None:
    out = tmp_path / "o"
    _write("xsv_pipe", str(out))
    with pytest.raises(OutputExistsError, match="is not empty"):
        XSVWriter(out=str(out), columns=ss.ROWS_COLUMNS, separator="|")
    with (
        pytest.raises(RuntimeError, match="boom"),
        XSVWriter(
            out=str(out), columns=ss.ROWS_COLUMNS, separator="|", exist_ok=True, size_limit=60
        ) as w,
    ):
        for r in ss.rows(10, 1):
            w.write(r)
        raise RuntimeError("boom")
    assert not (out / "index.json").exists()  # no index names shards of a failed run


class RecordingSink:
    def __init__(self, *args: Any) -> None:
        self.args = args
        self.calls: list[tuple[Any, ...]] = []

    def shard_done(self, path: str, key: str) -> None:
        assert os.path.isfile(path)
        self.calls.append(("shard_done", key))

    def check(self) -> None:
        self.calls.append(("check",))

    def finish(self, index_path: str) -> None:
        self.calls.append(("finish", os.path.basename(index_path)))

    def close(self) -> None:
        self.calls.append(("close",))


def test_remote_out_ships_data_then_meta_then_index(tmp_path: Path) -> None:
    sinks: list[RecordingSink] = []

    def factory(*args: Any) -> RecordingSink:
        sinks.append(RecordingSink(*args))
        return sinks[-1]

    _write("tsv_br", (str(tmp_path / "loc"), "s3://bucket/ds"), sink_factory=factory,
           keep_local=True)  # fmt: skip
    (sink,) = sinks
    assert sink.args == ("s3://bucket/ds", str(tmp_path / "loc"), True)
    done = [c[1] for c in sink.calls if c[0] == "shard_done"]
    assert done == ["shard.00000.tsv.br", "shard.00000.tsv.meta.br",
                    "shard.00001.tsv.br", "shard.00001.tsv.meta.br"]  # fmt: skip
    assert sink.calls[-2:] == [("finish", "index.json"), ("close",)]


def test_remote_out_to_s3_emulator(s3_bucket: str, tmp_path: Path) -> None:
    from astream.storage.sync import download

    url = f"{s3_bucket}/xsv-{uuid.uuid4().hex[:8]}"
    _write("csv_hashes", url, max_workers=2, retry=1)
    download(url, str(tmp_path / "back"))
    ours, ref = _files(tmp_path / "back"), _files(SPLIT / "csv_hashes")
    assert sorted(ours) == sorted(ref)
    assert all(ours[k] == ref[k] for k in ref)


def test_bad_remote_arguments(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"retry must be an int in 0\.\.100"):
        JSONWriter(out="s3://b/x", columns={"a": "int"}, retry=-1)
    with pytest.raises(
        ConfigError, match=r"max_workers \(concurrent uploads\) must be an int in 1..256"
    ):
        JSONWriter(out="s3://b/x", columns={"a": "int"}, max_workers="4")


def test_progress_bar_counts_samples_and_shards(tmp_path: Any, capsys: Any) -> None:
    from astream import MDSWriter

    for cls, kw in (
        (JSONWriter, {"columns": {"a": "int"}}),
        (MDSWriter, {"columns": {"a": "int"}}),
    ):
        out = str(tmp_path / cls.__name__)
        with cls(out=out, size_limit=200, progress_bar=True, **kw) as w:  # type: ignore[operator]
            for i in range(100):
                w.write({"a": i})
        err = capsys.readouterr().err
        assert f"{cls.__name__} {out}" in err and "100 samples" in err, err
        assert f"shards={len(w.shards)}" in err and len(w.shards) > 3
