"""``astream convert`` on awkward CSV/TSV/JSONL input: a UTF-8 BOM, duplicate or empty header
names, ragged rows, text that is not UTF-8, an empty input, a bound on ``--workers``.

Every refusal is one line ``astream: error: <file>: line N: ...`` and exit 2 (docs/cli.md)."""

from __future__ import annotations

import os
from typing import Any

import pytest

from astream import LocalDataset


def _write(path: Any, text: str, encoding: str = "utf-8") -> str:
    with open(path, "w", encoding=encoding, newline="") as f:
        f.write(text)
    return os.fspath(path)


def _one_line_error(r: Any, *parts: str) -> None:
    assert r.code == 2, (r.code, r.out, r.err)
    assert r.err.startswith("astream: error: ") and r.err.count("\n") == 1, r.err
    assert "Traceback" not in r.err
    for p in parts:
        assert p in r.err, (p, r.err)


@pytest.mark.parametrize("ext", ["csv", "jsonl"])
def test_utf8_bom_is_not_part_of_the_first_column(cli, tmp_path, ext):
    if ext == "csv":
        text = "\ufeffid,name\n1,a\n2,b\n"
    else:
        text = '\ufeff{"id": 1, "name": "a"}\n{"id": 2, "name": "b"}\n'
    src = _write(tmp_path / f"in.{ext}", text)
    out = str(tmp_path / "out")
    r = cli("convert", src, out)
    assert r.code == 0, r.err
    assert "columns id:int, name:str" in r.out
    assert [(s["id"], s["name"]) for s in LocalDataset(out)] == [(1, "a"), (2, "b")]


@pytest.mark.parametrize(
    ("header", "message"),
    [
        ("id,id,x", "line 1: column 'id' appears twice in the header"),
        ("id,,x", "line 1: column 2 of the header has no name"),
    ],
)
def test_bad_header_names_the_file_and_line(cli, tmp_path, header, message):
    src = _write(tmp_path / "in.csv", f"{header}\n1,2,3\n")
    r = cli("convert", src, tmp_path / "out")
    _one_line_error(r, src, message)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        # line 3 has too few fields
        ("1,a,x\n2,b\n3,c,z\n", "line 3: 2 fields, but the header has 3"),
        # line 4 has too many; the quoted field of row 2 spans lines 2-3
        ('1,"a\nb",x\n2,c,y,extra\n', "line 4: 4 fields, but the header has 3"),
    ],
)
@pytest.mark.parametrize("workers", ["1", "2"])
def test_ragged_row_names_the_file_and_line(cli, tmp_path, rows, message, workers):
    src = _write(tmp_path / "in.csv", "id,name,tag\n" + rows)
    r = cli("convert", src, tmp_path / "out", "--workers", workers)
    _one_line_error(r, src, message)


def test_ragged_row_with_given_columns(cli, tmp_path):
    src = _write(tmp_path / "in.tsv", "id\tname\n1\ta\n2\n")
    r = cli("convert", src, tmp_path / "out", "--columns", "id:int,name:str")
    _one_line_error(r, src, "line 3: 1 fields, but the header has 2")


def test_csv_that_is_not_utf8(cli, tmp_path):
    src = _write(tmp_path / "in.csv", "id,name\n1,caf\u00e9\n", encoding="latin-1")
    r = cli("convert", src, tmp_path / "out")
    _one_line_error(r, src, "not UTF-8")


@pytest.mark.parametrize(("ext", "text"), [("csv", "id,name\n"), ("jsonl", "\n"), ("csv", "")])
def test_empty_input_is_an_empty_dataset_error(cli, tmp_path, ext, text):
    src = _write(tmp_path / f"in.{ext}", text)
    r = cli("convert", src, tmp_path / "out")
    _one_line_error(r, src, "is empty: no rows to write")


def test_workers_bound(cli, tmp_path):
    src = _write(tmp_path / "in.csv", "id\n1\n")
    r = cli("convert", src, tmp_path / "out", "--workers", str(10**6))
    _one_line_error(r, "--workers", "1000000", "1..1024")
