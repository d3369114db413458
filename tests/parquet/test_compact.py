"""The compact (columnar) Parquet index astream caches for itself, and the virtual shards built
from its arrays: exactly the slow path's entries and errors, on real pyarrow tables and on
generated ones; a damaged or old-format cache is rebuilt, never trusted."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from astream import Stream, StreamingDataset
from astream.errors import ConfigError, FormatError
from astream.parquet.compact import compact_shards, compact_table, dump_compact, load_compact
from astream.parquet.io_index import CACHE_NAME, build_table
from astream.parquet.published import dump_table
from astream.parquet.table import ParquetFile, ParquetTable, RowGroup, row_group_shards
from astream.storage import open_store

from .conftest import write_table


def _table(root: str) -> ParquetTable:
    async def go() -> ParquetTable:
        store = open_store(root)
        try:
            return (await build_table(store, use_published=False))[0]
        finally:
            await store.aclose()

    return asyncio.run(go())


def _same_shards(table: ParquetTable, columns: list[str] | None) -> None:
    slow = row_group_shards(table, columns)
    ct = load_compact(dump_compact(compact_table(table)))
    assert ct is not None
    fast = compact_shards(ct, columns)
    assert len(fast) == len(slow)
    assert list(fast) == slow  # every field, the source file (footer bytes) included
    assert [fast[j] for j in range(len(slow))] == slow  # by index (the catalog's way)
    assert fast.raw_bytes.tolist() == [s.raw_data.bytes for s in slow]
    assert fast.raw_names == [s.raw_data.basename for s in slow]
    assert fast.samples.tolist() == [s.samples for s in slow]


def test_real_tables_give_the_slow_paths_shards(tmp_path: Any) -> None:
    root = str(tmp_path / "t")
    write_table(root)  # nulls, nested lists, binary, dictionary strings; 4 row-group sizes
    # a second schema: the same columns in another order, one more column, no dictionary
    t = pq.read_table(os.path.join(root, "part-0.parquet"))
    t = t.select(["score", "nest", "label", "tok", "img", "txt"]).append_column(
        "extra", pa.array(range(len(t)), pa.int32())
    )
    pq.write_table(t, os.path.join(root, "zz-0.parquet"), row_group_size=3,
                   use_dictionary=False)  # fmt: skip
    table = _table(root)
    assert len({(f.columns, f.types) for f in table.files}) == 2
    assert load_compact(dump_compact(compact_table(table))).table() == table  # type: ignore[union-attr]
    for cols in (None, ["label"], ["nest", "img"], ["tok", "label", "score"]):
        _same_shards(table, cols)


def test_errors_are_the_slow_paths(tmp_path: Any) -> None:
    root = str(tmp_path / "t")
    write_table(root, [(10, 4), (10, 4)])
    t = pq.read_table(os.path.join(root, "part-1.parquet"))
    pq.write_table(t.drop_columns(["img"]), os.path.join(root, "part-2.parquet"))
    pq.write_table(
        t.set_column(0, "label", pa.array(range(10), pa.int32())),
        os.path.join(root, "part-3.parquet"),
    )
    table = _table(root)
    ct = compact_table(table)
    for cols, err in ((["img"], FormatError), (["label"], FormatError), (["nope"], ConfigError)):
        with pytest.raises(err) as slow:
            row_group_shards(table, cols)
        with pytest.raises(err) as fast:
            compact_shards(ct, cols)
        assert str(fast.value) == str(slow.value)
    with pytest.raises(FormatError, match=r"part-2\.parquet: has no column 'img'"):
        compact_shards(ct, ["img"])


_RANGE = st.tuples(st.integers(4, 400), st.integers(1, 120)).map(lambda r: (r[0], r[0] + r[1]))


@st.composite
def _tables(draw: Any) -> ParquetTable:
    """Files with 1-3 columns in one of two schemas, row groups with 0-3 ranges per column:
    overlapping, touching, unsorted and disjoint ranges all occur."""
    schemas = [(("a", "b", "c"), ("int64", "string", "list<item: int32>")),
               (("c", "a", "b"), ("list<item: int32>", "int64", "string"))]  # fmt: skip
    files = []
    for i in range(draw(st.integers(1, 6))):
        names, types = schemas[draw(st.integers(0, 1))]
        groups = []
        for _ in range(draw(st.integers(0, 4))):
            chunks = tuple(tuple(draw(st.lists(_RANGE, min_size=0, max_size=3))) for _ in names)
            groups.append(RowGroup(draw(st.integers(0, 50)), chunks))
        etag = draw(st.one_of(st.none(), st.text("0123456789abcdef", min_size=1, max_size=8)))
        footer = draw(st.binary(max_size=20))
        files.append(ParquetFile(f"d/f{i}.parquet", 600, etag, names, types, tuple(groups), footer))
    return ParquetTable(tuple(files))


@settings(max_examples=150, deadline=None)
@given(_tables(), st.sampled_from([None, ["a"], ["b", "c"], ["c", "a", "b"]]))
def test_generated_tables_give_the_slow_paths_shards(table: ParquetTable, cols: Any) -> None:
    _same_shards(table, cols)


def _ds(root: str, local: str) -> StreamingDataset:
    return StreamingDataset(
        streams=[Stream(remote=root, local=local, format="parquet")], batch_size=4
    )


def test_damaged_and_old_caches_are_rebuilt(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from astream.parquet import io_footers

    root = str(tmp_path / "t")
    write_table(root, [(30, 7), (20, 16)])
    reads: list[str] = []
    real = io_footers.read_footer

    async def counting(store: Any, info: Any) -> Any:
        reads.append(info.key)
        return await real(store, info)

    monkeypatch.setattr(io_footers, "read_footer", counting)
    local = str(tmp_path / "c")
    want = [x["label"] for x in _ds(root, local)]
    path = os.path.join(local, ".astream", CACHE_NAME)
    good = Path(path).read_bytes()
    assert reads and load_compact(good) is not None
    table = load_compact(good).table()  # type: ignore[union-attr]
    # one flipped byte anywhere (here: inside a footer, which nothing else would notice)
    for pos in (len(good) - 100, 20, len(good) - 1):
        bad = bytearray(good)
        bad[pos] ^= 0x40
        assert load_compact(bytes(bad)) is None
        with open(path, "wb") as f:
            f.write(bad)
        reads.clear()
        assert [x["label"] for x in _ds(root, local)] == want
        assert sorted(reads) == ["part-0.parquet", "part-1.parquet"]  # read again
        assert Path(path).read_bytes() == good  # and the cache rewritten whole
    # a truncated cache, and the older JSON form (read through the validating parser)
    with open(path, "wb") as f:
        f.write(good[: len(good) // 2])
    reads.clear()
    assert [x["label"] for x in _ds(root, local)] == want and len(reads) == 2
    with open(path, "wb") as f:
        f.write(dump_table(table))
    reads.clear()
    assert [x["label"] for x in _ds(root, local)] == want and reads == []
    assert Path(path).read_bytes() == good  # rewritten compact
    shutil.rmtree(local)


def test_warm_start_makes_no_file_objects(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Over an unchanged table, a warm start builds one ParquetFile (the first shard's entry:
    the dataset checks each shard configuration once), not one per file: the shards come from
    the cached arrays; a read makes the file it reads."""
    from astream.parquet import compact

    root = str(tmp_path / "t")
    write_table(root, [(30, 7), (20, 16), (10, 5)])
    local = str(tmp_path / "c")
    want = [x["label"] for x in _ds(root, local)]
    made: list[str] = []
    real = compact.CompactTable.file

    def counting(self: Any, i: int) -> Any:
        if i not in self._files:
            made.append(self.keys[i])
        return real(self, i)

    monkeypatch.setattr(compact.CompactTable, "file", counting)
    ds = _ds(root, local)
    assert len(ds) == 60 and made == ["part-0.parquet"]
    assert ds[35]["label"] == want[35] and "part-1.parquet" in made


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), _RANGE), max_size=30))
def test_union_bytes_both_ways(rows: list[tuple[int, tuple[int, int]]]) -> None:
    """The shifted single pass and the group-by-group fallback (taken when the shifted offsets
    would overflow int64: huge objects) give merge_ranges' covered bytes."""
    import numpy as np

    from astream.parquet.compact import _union_bytes
    from astream.parquet.table import merge_ranges

    gid = np.array([g for g, _ in rows], dtype=np.int64)
    s = np.array([r[0] for _, r in rows], dtype=np.int64)
    e = np.array([r[1] for _, r in rows], dtype=np.int64)
    want = [sum(b - a for a, b in merge_ranges([r for g2, r in rows if g2 == g])) for g in range(5)]
    assert _union_bytes(gid, s, e, 5, 600).tolist() == want
    assert _union_bytes(gid, s, e, 5, 1 << 61).tolist() == want  # the fallback
