"""``astream convert`` of Parquet takes a row group's rows only when they are as many as its footer
declares, as the streaming path does: a footer that lies about one group (its file total
adjusted to agree, and no flat column to count values by) or a page pyarrow misreads is a
``FormatError`` naming the file and the group, exit 2, and nothing is published."""

from __future__ import annotations

import os
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from astream import StreamingDataset
from astream.cli import main as astream_cli
from astream.errors import FormatError

from .test_values import _tamper


def _nested_only(root: str) -> str:
    """1,000 rows in 10 groups of 100, one ``list<int16>`` column (its values count
    elements, not rows: the footer's row counts cannot be checked against them)."""
    os.makedirs(root)
    path = os.path.join(root, "bad.parquet")
    table = pa.table({"l": pa.array([[i, -i] for i in range(1000)], pa.list_(pa.int16()))})
    pq.write_table(table, path, row_group_size=100)
    return path


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_group_longer_than_its_pages_is_refused(
    tmp_path: Any, capsys: pytest.CaptureFixture[str], workers: str
) -> None:
    root = str(tmp_path / "t")
    path = _nested_only(root)
    _tamper(path, 3, 135, 1035)  # group 3 says 135 rows, the file 1,035; pages hold 100
    assert pq.read_table(path).num_rows == 1000  # pyarrow reads the pages, not the footer
    out = str(tmp_path / "mds")
    capsys.readouterr()
    rc = astream_cli(["convert", root, out, "--format", "parquet", "--workers", workers])
    assert rc == 2
    assert capsys.readouterr().err == (
        f"astream: error: {path}: row group 3 decodes to 100 rows, its footer says 135\n"
    )
    assert not os.path.exists(os.path.join(out, "index.json"))
    with pytest.raises(FormatError, match=r"bad\.parquet: row group 3 has 100 rows"):
        list(StreamingDataset(local=root, format="parquet", batch_size=2))  # the same verdict


def test_a_group_pyarrow_reads_short_is_refused(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A ``list<bool>`` group of data page v2 and tiny pages that pyarrow decodes as no rows
    (see test_values.py): convert names the group instead of finding no rows at all."""
    root = str(tmp_path / "t")
    os.makedirs(root)
    path = os.path.join(root, "a.parquet")
    table = pa.table({"b": pa.array([[], [True, None]], pa.list_(pa.bool_()))})
    with pq.ParquetWriter(path, table.schema, data_page_version="2.0", data_page_size=16,
                          use_dictionary=False) as w:  # fmt: skip
        w.write_table(table, row_group_size=1)
    if pq.ParquetFile(path).read_row_group(0).num_rows == 1:  # pragma: no cover - fixed
        pytest.skip("this pyarrow reads the group right")
    out = str(tmp_path / "mds")
    capsys.readouterr()
    assert astream_cli(["convert", root, out, "--format", "parquet"]) == 2
    assert capsys.readouterr().err == (
        f"astream: error: {path}: row group 0 decodes to 0 rows, its footer says 1\n"
    )
    assert not os.path.exists(os.path.join(out, "index.json"))


def test_an_honest_file_converts_whole(tmp_path: Any) -> None:
    """The check passes every row of a file whose footer is right (the groups' sum)."""
    from astream import LocalDataset

    root = str(tmp_path / "t")
    _nested_only(root)
    out = str(tmp_path / "mds")
    assert astream_cli(["convert", root, out, "--format", "parquet", "--workers", "2"]) == 0
    assert [list(s["l"]) for s in LocalDataset(out)] == [[i, -i] for i in range(1000)]
