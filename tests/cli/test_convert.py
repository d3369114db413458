"""``astream convert``: every input kind, worker processes, remote output, bad input."""

from __future__ import annotations

import csv
import json
import os
import uuid
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from astream import LocalDataset
from astream.storage.sync import download
from tests.cli.conftest import write_jsonl

ROWS = [{"id": i, "text": f"row {i}", "score": i / 4, "tags": [i, "x"]} for i in range(300)]


def _read(path: str) -> list[dict[str, Any]]:
    return list(LocalDataset(path))


def _columns(path: str) -> dict[str, str]:
    with open(os.path.join(path, "index.json")) as f:
        s = json.load(f)["shards"][0]
    return dict(zip(s["column_names"], s["column_encodings"]))


def test_jsonl_inferred_columns_exact_samples(cli, tmp_path):
    src = write_jsonl(str(tmp_path / "in.jsonl"), ROWS)
    out = str(tmp_path / "out")
    r = cli("convert", src, out, "--size-limit", "4kb", "--hashes", "xxh64,sha1")
    assert r.code == 0, r.err
    assert r.out.startswith("converted 300 samples (jsonl) into ")
    assert "columns id:int, text:str, score:float64, tags:json" in r.out
    assert _columns(out) == {"id": "int", "score": "float64", "tags": "json", "text": "str"}
    got = _read(out)
    assert [g["id"] for g in got] == list(range(300))
    assert [(g["text"], float(g["score"]), g["tags"]) for g in got] == [
        (r["text"], r["score"], r["tags"]) for r in ROWS
    ]
    with open(os.path.join(out, "index.json")) as f:
        shards = json.load(f)["shards"]
    assert len(shards) > 1 and all(s["hashes"] == ["sha1", "xxh64"] for s in shards)


def test_csv_strings_become_numbers(cli, tmp_path):
    path = tmp_path / "in.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["n", "x", "name"])
        for i in range(50):
            w.writerow([i, i * 0.5, f"name{i}"])
    out = str(tmp_path / "out")
    assert cli("convert", path, out).code == 0
    assert _columns(out) == {"n": "int", "x": "float64", "name": "str"}
    got = _read(out)
    assert [(g["n"], float(g["x"]), g["name"]) for g in got] == [
        (i, i * 0.5, f"name{i}") for i in range(50)
    ]


def test_parquet_with_nulls_and_compression(cli, tmp_path):
    table = pa.table(
        {
            "id": list(range(100)),
            "maybe": [None if i % 3 == 0 else i for i in range(100)],
            "blob": [bytes([i]) * 5 for i in range(100)],
        }
    )
    pq.write_table(table, tmp_path / "in.parquet", row_group_size=30)
    out = str(tmp_path / "out")
    r = cli("convert", tmp_path / "in.parquet", out, "--compression", "zstd:7")
    assert r.code == 0, r.err
    assert _columns(out) == {"id": "int", "maybe": "json", "blob": "bytes"}
    got = _read(out)
    assert [(g["id"], g["maybe"], g["blob"]) for g in got] == [
        (i, None if i % 3 == 0 else i, bytes([i]) * 5) for i in range(100)
    ]
    assert all(n.endswith(".mds.zstd") for n in os.listdir(out) if n.startswith("shard"))


def test_image_folder_with_labels(cli, tmp_path):
    root = tmp_path / "imgs"
    pixels = {}
    for label in ("cat", "dog"):
        (root / label).mkdir(parents=True)
        for k in range(3):
            arr = np.full((4, 5, 3), 40 * k + (label == "dog"), dtype=np.uint8)
            Image.fromarray(arr).save(root / label / f"{k}.png")
            pixels[f"{label}/{k}.png"] = arr
    out = str(tmp_path / "out")
    assert cli("convert", root, out).code == 0
    assert _columns(out) == {"path": "str", "data": "png", "label": "str"}
    got = _read(out)
    assert [g["path"] for g in got] == sorted(pixels)
    for g in got:
        assert g["label"] == g["path"].split("/")[0]
        assert np.array_equal(np.asarray(g["data"]), pixels[g["path"]])


def test_text_folder(cli, tmp_path):
    root = tmp_path / "docs"
    root.mkdir()
    for k in range(4):
        (root / f"{k}.txt").write_text(f"document {k}\n")
    (root / ".hidden").write_text("skipped")
    out = str(tmp_path / "out")
    assert cli("convert", root, out).code == 0
    assert _columns(out) == {"path": "str", "data": "str"}
    assert [(g["path"], g["data"]) for g in _read(out)] == [
        (f"{k}.txt", f"document {k}\n") for k in range(4)
    ]


def test_huggingface_save_to_disk_layout(cli, tmp_path):
    # The layout `datasets.Dataset.save_to_disk` writes: Arrow IPC stream files + state.json.
    root = tmp_path / "hf"
    root.mkdir()
    names = []
    for part in range(2):
        name = f"data-{part:05d}-of-00002.arrow"
        names.append({"filename": name})
        t = pa.table({"idx": [part * 10 + i for i in range(10)], "s": [f"s{i}" for i in range(10)]})
        with pa.OSFile(str(root / name), "wb") as f, pa.ipc.new_stream(f, t.schema) as w:
            w.write_table(t, max_chunksize=4)
    (root / "state.json").write_text(json.dumps({"_data_files": names, "_split": None}))
    (root / "dataset_info.json").write_text("{}")
    out = str(tmp_path / "out")
    r = cli("convert", root, out)
    assert r.code == 0, r.err
    assert "(huggingface)" in r.out
    assert [(g["idx"], g["s"]) for g in _read(out)] == [
        (p * 10 + i, f"s{i}") for p in range(2) for i in range(10)
    ]


def test_workers_write_parts_merged_in_input_order(cli, tmp_path):
    src = write_jsonl(str(tmp_path / "in.jsonl"), ROWS)
    out = str(tmp_path / "out")
    r = cli("convert", src, out, "--workers", "3", "--size-limit", "4kb")
    assert r.code == 0, r.err
    with open(os.path.join(out, "index.json")) as f:
        names = [s["raw_data"]["basename"] for s in json.load(f)["shards"]]
    assert {n.split("/")[0] for n in names} == {"part00000", "part00001", "part00002"}
    assert [g["id"] for g in _read(out)] == list(range(300))


def test_remote_out_with_workers(cli, tmp_path, s3_bucket):
    src = write_jsonl(str(tmp_path / "in.jsonl"), ROWS)
    url = f"{s3_bucket}/cli-{uuid.uuid4().hex[:8]}"
    r = cli("convert", src, url, "--workers", "2", "--compression", "zstd", "--hashes", "xxh64")
    assert r.code == 0, r.err
    local = str(tmp_path / "back")
    download(url, local)
    assert [g["id"] for g in _read(local)] == list(range(300))


def test_given_columns_subset_and_coercion(cli, tmp_path):
    src = write_jsonl(str(tmp_path / "in.jsonl"), [{"a": "7", "b": 1, "c": "z"}] * 3)
    out = str(tmp_path / "out")
    assert cli("convert", src, out, "--columns", "a:int,c:str").code == 0
    assert _read(out) == [{"a": 7, "c": "z"}] * 3


def test_errors_are_one_line(cli, tmp_path):
    missing = str(tmp_path / "nope.jsonl")
    r = cli("convert", missing, str(tmp_path / "o"))
    assert (r.code, r.out) == (2, "")
    assert r.err == f"astream: error: input: {missing!r} does not exist\n"

    src = write_jsonl(str(tmp_path / "in.jsonl"), ROWS[:3])
    with open(src, "a") as f:
        f.write("{not json\n")
    r = cli("convert", src, str(tmp_path / "o2"))
    assert r.code == 2
    assert r.err.startswith("astream: error: ") and "line 4: not JSON" in r.err
    assert src in r.err and r.err.count("\n") == 1

    src = write_jsonl(str(tmp_path / "b.jsonl"), [{"a": 1}])
    r = cli("convert", src, str(tmp_path / "o3"), "--columns", "a:int,zz:str")
    assert r.code == 2
    assert "row 0: row has no column 'zz'" in r.err

    out = tmp_path / "full"
    out.mkdir()
    (out / "x").write_text("keep")
    r = cli("convert", src, out)
    assert (
        r.err == f"astream: error: out: {str(out)!r} is not empty (pass --exist-ok to replace it)\n"
    )
    assert (out / "x").read_text() == "keep"

    r = cli("convert", src, str(tmp_path / "o4"), "--compression", "lzma")
    assert r.code == 2 and "lzma" in r.err


@pytest.mark.parametrize("fmt", ["data.bin"])
def test_unknown_extension_needs_format(cli, tmp_path, fmt):
    p = tmp_path / fmt
    p.write_bytes(b"x")
    r = cli("convert", p, tmp_path / "o")
    assert r.err == (
        f"astream: error: input: cannot tell the format of {str(p)!r} from its name; "
        "pass --format\n"
    )


def test_progress_bar_reports_rate(cli, tmp_path):
    src = write_jsonl(str(tmp_path / "in.jsonl"), ROWS)
    r = cli("convert", src, str(tmp_path / "out"), "--progress")
    assert r.code == 0
    assert "300/300" in r.err and "samples/s" in r.err and "MB/s" in r.err


def test_optional_keys_become_json_and_missing_reads_none(cli, tmp_path):
    # docs/cli.md: a column missing from some rows is inferred json; the rows without it store
    # null, read back as None. Before: "row has no column 'b'".
    rows = [{"id": 1, "b": "x"}, {"id": 2}, {"id": 3, "b": [1, 2]}, {"id": 4, "c": 2.5}]
    src = write_jsonl(str(tmp_path / "opt.jsonl"), rows)
    out = str(tmp_path / "out")
    r = cli("convert", src, out)
    assert r.code == 0, r.err
    assert "columns id:int, b:json, c:json" in r.out
    assert _columns(out) == {"id": "int", "b": "json", "c": "json"}
    assert _read(out) == [
        {"id": 1, "b": "x", "c": None},
        {"id": 2, "b": None, "c": None},
        {"id": 3, "b": [1, 2], "c": None},
        {"id": 4, "b": None, "c": 2.5},
    ]
    # the same with two workers (each worker coerces its own range)
    out2 = str(tmp_path / "out2")
    assert cli("convert", src, out2, "--workers", "2").code == 0
    assert _read(out2) == _read(out)


def test_optional_key_in_a_typed_column_or_unseen_key_is_refused(cli, tmp_path):
    # a column present in every inferred row, then missing: refused naming row and column
    rows = [{"id": i, "b": "x"} for i in range(1000)] + [{"id": 1000}]
    src = write_jsonl(str(tmp_path / "late.jsonl"), rows)
    r = cli("convert", src, str(tmp_path / "o"))
    assert r.code == 2
    assert r.err == (
        f"astream: error: {src}: row 1000: row has no column 'b' (columns: ['id']); a column "
        "missing from some rows needs the json encoding (--columns ...,b:json)\n"
    )
    # a key first seen after the inferred rows: refused rather than silently dropped
    rows = [{"id": i} for i in range(1000)] + [{"id": 1000, "late": 1}]
    src = write_jsonl(str(tmp_path / "new.jsonl"), rows)
    r = cli("convert", src, str(tmp_path / "o2"))
    assert r.code == 2
    assert r.err == (
        f"astream: error: {src}: row 1000: row has column 'late' that the first 1000 rows "
        "do not have (it would be dropped); list every column with --columns\n"
    )
    # with --columns, unlisted keys are dropped on purpose and json columns may be missing
    out = str(tmp_path / "o3")
    assert cli("convert", src, out, "--columns", "id:int,late:json").code == 0
    got = _read(out)
    assert got[0] == {"id": 0, "late": None} and got[-1] == {"id": 1000, "late": 1}
