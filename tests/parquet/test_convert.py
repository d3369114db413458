"""``astream convert`` from a remote Parquet prefix (S3, GCS, Azure emulators) to MDS: exact
rows in order, worker processes reading only their row groups, one object, a split, the
progress bar, and the refusals."""

from __future__ import annotations

import os
import uuid
from typing import Any

import numpy as np
import pytest

from astream import LocalDataset
from astream.cli import main
from astream.storage.sync import upload

from .conftest import write_table

COLUMNS = "label:int,score:float64,txt:json,tok:json,nest:json"


def _cli(capsys: pytest.CaptureFixture[str], *argv: Any) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([os.fspath(a) for a in argv])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def _want(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(r["label"], r["score"], r["txt"], None if r["tok"] is None else r["tok"].tolist(),
             r["nest"]) for r in rows]  # fmt: skip


def _got(out: str) -> list[tuple[Any, ...]]:
    return [(s["label"], float(s["score"]), s["txt"], s["tok"], s["nest"])
            for s in LocalDataset(out)]  # fmt: skip


@pytest.mark.parametrize("backend", ["s3", "gcs", "azure"])
def test_remote_prefix_to_mds_exact_rows(
    backend: str, pq_table: Any, tmp_path: Any, request: pytest.FixtureRequest, capsys: Any
) -> None:
    root, rows = pq_table
    bucket = request.getfixturevalue(
        {"s3": "s3_bucket", "gcs": "gcs_bucket", "azure": "azure_container"}[backend]
    )
    url = f"{bucket}/conv-{uuid.uuid4().hex[:8]}/"
    upload(root, url)
    out = str(tmp_path / "out")
    code, stdout, err = _cli(capsys, "convert", url, out, "--columns", COLUMNS,
                             "--size-limit", "2kb", "--progress")  # fmt: skip
    assert code == 0, err
    assert stdout.startswith("converted 170 samples (parquet) into ")
    assert "170/170" in err and "MB/s" in err  # the progress bar, as for local inputs
    assert _got(out) == _want(rows)
    assert isinstance(LocalDataset(out)[0]["label"], (int, np.integer))


def test_workers_one_object_split_and_refusals(
    pq_table: Any, s3_bucket: str, s3_server: Any, make_proxy: Any, tmp_path: Any, capsys: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    root, rows = pq_table
    url = f"{s3_bucket}/conv-{uuid.uuid4().hex[:8]}"
    upload(root, url)
    # through the counting proxy: 3 workers read their ranges, each row group fetched once
    proxy = make_proxy(s3_server.url)
    monkeypatch.setenv("S3_ENDPOINT_URL", proxy.url)
    out = str(tmp_path / "w3")
    code, _, err = _cli(capsys, "convert", url, out, "--columns", COLUMNS, "--workers", "3")
    assert code == 0, err
    assert _got(out) == _want(rows)
    got = sorted(r for r in proxy.stats.ranges if r[0].endswith(".parquet"))
    monkeypatch.setenv("S3_ENDPOINT_URL", s3_server.url)
    from astream.cli.sources import ParquetTableSource, _group_ranges

    want = []
    for f in ParquetTableSource(url).table.files:
        path = f"/{url.split('://', 1)[1]}/{f.key}"
        want.append((path, f"bytes=0-{f.size - 1}"))  # the footer GET (files < 64 KiB)
        for g in range(len(f.row_groups)):
            want += [(path, f"bytes={s}-{e - 1}") for s, e in _group_ranges(f, g)]
    assert got == sorted(want)  # footers once (the workers read none), each row group once
    # one object
    one = str(tmp_path / "one")
    code, stdout, err = _cli(capsys, "convert", f"{url}/part-2.parquet", one, "--columns",
                             COLUMNS)  # fmt: skip
    assert code == 0, err and stdout.startswith("converted 80 samples")
    assert _got(one) == _want(rows[80:160])
    # a Hugging Face split under a prefix
    hf = str(tmp_path / "hf")
    train = write_table(os.path.join(hf, "data"), [(20, 8), (15, 8)], prefix="train")
    write_table(os.path.join(hf, "data"), [(9, 4)], prefix="test", start=1000)
    hf_url = f"{s3_bucket}/hf-{uuid.uuid4().hex[:8]}"
    upload(hf, hf_url)
    sp = str(tmp_path / "sp")
    code, _, err = _cli(capsys, "convert", hf_url, sp, "--split", "train", "--columns", COLUMNS)
    assert code == 0, err
    assert _got(sp) == _want(train)
    # refusals, one line each
    code, _, err = _cli(capsys, "convert", url, str(tmp_path / "x"), "--format", "jsonl")
    assert code != 0 and "--format: a remote input must be Parquet, got --format jsonl" in err
    code, _, err = _cli(capsys, "convert", f"{s3_bucket}/nothing-here/", str(tmp_path / "y"))
    assert code != 0 and "no *.parquet objects under" in err
    code, _, err = _cli(capsys, "convert", root, str(tmp_path / "z"), "--split", "train")
    assert code != 0 and "--split is for a Parquet table" in err


@pytest.mark.parametrize("backend", ["s3", "local"])
def test_file_rewritten_during_convert_is_object_changed(
    backend: str, tmp_path: Any, request: pytest.FixtureRequest, capsys: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """The footers are read when the source opens; a file rewritten after that (here: right
    after) fails the conditional row-group reads with ObjectChangedError naming it, on the
    source and through the CLI -- never rows of two versions."""
    import pyarrow.parquet as pq

    from astream.cli.sources import ParquetTableSource
    from astream.errors import ObjectChangedError
    from astream.storage.sync import upload_key

    src = str(tmp_path / "src")
    write_table(src)
    if backend == "s3":
        url = f"{request.getfixturevalue('s3_bucket')}/chg-{uuid.uuid4().hex[:8]}"
        upload(src, url)
    else:
        url = src
    shorter = str(tmp_path / "short.parquet")
    pq.write_table(pq.read_table(os.path.join(src, "part-1.parquet")).slice(0, 10), shorter)

    def rewrite() -> None:
        if backend == "s3":
            upload_key(shorter, url, "part-1.parquet")
        else:
            os.replace(shorter, os.path.join(src, "part-1.parquet"))

    source = ParquetTableSource(url)
    assert [r["label"] for r in source.rows(0, 30)] == list(range(30))  # part-0: unchanged
    real = ParquetTableSource._read_table

    def then_rewrite(self: Any) -> Any:
        got = real(self)
        rewrite()
        return got

    monkeypatch.setattr(ParquetTableSource, "_read_table", then_rewrite)
    args = ("convert", url, str(tmp_path / "out"), "--columns", COLUMNS)
    if backend == "local":
        args += ("--format", "parquet")
    code, _, err = _cli(capsys, *args)
    assert code != 0
    assert "error: changed since the index was built" in err and "part-1.parquet]" in err, err
    with pytest.raises(ObjectChangedError, match=r"changed since the .*part-1\.parquet\]"):
        list(source.rows(30, 80))  # the source opened before the rewrite


def test_one_local_file_is_read_conditionally(
    tmp_path: Any, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A single local ``.parquet`` input is a table of one file: its rows convert exactly, a
    file rewritten after its footer was read fails with ObjectChangedError naming it, and a
    file that is not Parquet is a FormatError naming it."""
    import pyarrow.parquet as pq

    from astream.cli.sources import ParquetTableSource, open_source
    from astream.errors import FormatError, ObjectChangedError

    src = str(tmp_path / "src")
    write_table(src)
    one = os.path.join(src, "part-1.parquet")
    want = pq.read_table(one).column("label").to_pylist()
    source = open_source(one)
    assert isinstance(source, ParquetTableSource)
    assert source.count() == len(want)
    assert [r["label"] for r in source.rows(0, source.count())] == want

    shorter = str(tmp_path / "short.parquet")
    pq.write_table(pq.read_table(one).slice(0, 10), shorter)
    os.replace(shorter, one)  # rewritten after `source` read its footer
    with pytest.raises(ObjectChangedError, match=r"changed since the .*part-1\.parquet\]"):
        list(source.rows(0, 5))

    real = ParquetTableSource._read_table

    def then_rewrite(self: Any) -> Any:
        got = real(self)
        pq.write_table(pq.read_table(one).slice(0, 3), one)
        return got

    monkeypatch.setattr(ParquetTableSource, "_read_table", then_rewrite)
    code, _, err = _cli(capsys, "convert", one, str(tmp_path / "out"), "--columns", COLUMNS)
    assert code != 0
    assert "error: changed since the index was built" in err and "part-1.parquet]" in err, err
    monkeypatch.undo()

    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not parquet at all, just some bytes")
    with pytest.raises(FormatError, match=r"bad\.parquet"):
        open_source(str(bad))
