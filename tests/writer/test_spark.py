"""astream.spark.dataframe_to_mds on a real local Spark (pyspark 4, local[2] with task retries).

One SparkSession per module; it starts after the S3 emulator so that Spark's Python workers
inherit the emulator's environment.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from astream.core.compression import decompress
from astream.errors import ConfigError, OutputExistsError
from astream.local import LocalDataset
from astream.spark import dataframe_to_mds
from tests.writer import spark_frame as sf

GOLDEN = Path(__file__).parent / "golden" / "spark_reference.json"


@pytest.fixture(scope="module")
def spark(s3_server: Any) -> Iterator[Any]:
    # local[2,2]: 2 cores, a task may fail once and is retried (spark.task.maxFailures); the
    # UDFs below live in this module
    yield from sf.local_spark("astream-tests", "local[2,2]", __name__)


@pytest.fixture(scope="module")
def frame(spark: Any) -> Any:
    return sf.build(spark).cache()


def _expected(i: int) -> dict[str, Any]:
    """Row ``i`` of spark_frame, computed here independently of Spark."""
    return {
        "i64": i,
        "u8": i % 128,
        "u16": i % 30000,
        "i32": i * 7 % 1000003,
        "s": f"row-{i}" + "x" * (i % 13),
        "bin": f"b{i}".encode(),
        "a32": np.arange(i, i + i % 5 + 1, dtype=np.int32),
        "a64": np.arange(0, i % 3 + 1, dtype=np.int64) * i,
    }


def _check_rows(samples: Any, n: int) -> None:
    """Every row once, and the values of a spread of rows exact."""
    seen = np.zeros(n, dtype=np.int64)
    for s in samples:
        i = int(s["i64"])
        seen[i] += 1
        if i % 997 == 0:
            want = _expected(i)
            for k in ("u8", "u16", "i32", "s", "bin"):
                assert s[k] == want[k], (i, k)
            for k in ("a32", "a64"):
                assert s[k].dtype == want[k].dtype and s[k].tolist() == want[k].tolist(), (i, k)
            assert str(s["dec"]) == f"{i / 100:.4f}"
    assert seen.min() == 1 and seen.max() == 1, "a row is missing or duplicated"


def test_local_output_equals_reference_shard_by_shard(frame: Any, tmp_path: Path) -> None:
    golden = json.loads(GOLDEN.read_text())
    out = tmp_path / "out"
    result = dataframe_to_mds(frame, mds_kwargs={"out": str(out), "size_limit": sf.SIZE_LIMIT})
    assert tuple(result) == (str(out), "")
    assert result.partition_counts == [sf.ROWS // sf.PARTITIONS] * sf.PARTITIONS
    assert sorted(os.listdir(out)) == ["00000", "00001", "00002", "00003", "index.json"]
    index = json.loads((out / "index.json").read_text())
    got: list[list[tuple[str, int, str]]] = [[] for _ in golden["parts"]]
    for shard in index["shards"]:
        part, base = shard["zip_data"]["basename"].split("/")
        raw = decompress("zstd", (out / part / base).read_bytes())
        got[int(part)].append((base, shard["samples"], hashlib.sha256(raw).hexdigest()))
    want = [[(s["basename"], s["samples"], s["raw_sha256"]) for s in p] for p in golden["parts"]]
    assert got == want
    _check_rows(LocalDataset(str(out)), sf.ROWS)


def test_s3_output_streams_every_row_once(frame: Any, s3_bucket: str, tmp_path: Path) -> None:
    from astream.torch.dataset import StreamingDataset

    url = f"{s3_bucket}/spark-{uuid.uuid4().hex[:8]}"
    result = dataframe_to_mds(frame, mds_kwargs={"out": url, "size_limit": sf.SIZE_LIMIT})
    assert result[1] == url
    assert sum(result.partition_counts) == sf.ROWS
    ds = StreamingDataset(remote=url, local=str(tmp_path / "cache"), batch_size=64)
    _check_rows(ds, sf.ROWS)
    with pytest.raises(OutputExistsError, match="not empty"):
        dataframe_to_mds(frame, mds_kwargs={"out": url})


def _dying_udf(pdf: Any, marker: str, rows_before_death: int) -> Iterator[dict[str, Any]]:
    """Partition 1's first attempt kills its Python worker after some rows (a marker file
    records that it happened); every other attempt writes its rows normally."""
    from pyspark import TaskContext

    from astream.integrations.frames import frame_samples

    ctx = TaskContext.get()
    assert ctx is not None
    doomed = ctx.partitionId() == 1 and not os.path.exists(marker)
    for k, sample in enumerate(frame_samples(pdf, sf.COLUMNS)):
        if doomed and k == rows_before_death:
            with open(marker, "w") as f:
                f.write(str(ctx.taskAttemptId()))
            os._exit(1)
        yield sample


@pytest.mark.parametrize("where", ["local", pytest.param("s3", marks=pytest.mark.slow)])
def test_killed_task_is_retried_without_duplicates(
    spark: Any, where: str, s3_bucket: str, tmp_path: Path
) -> None:
    rows = 20_000
    df = sf.build(spark, rows=rows)
    marker = str(tmp_path / f"died-{where}")
    out = str(tmp_path / "out") if where == "local" else f"{s3_bucket}/kill-{uuid.uuid4().hex[:8]}"
    result = dataframe_to_mds(
        df,
        mds_kwargs={"out": out, "columns": sf.COLUMNS, "size_limit": 1 << 16},
        udf_iterable=_dying_udf,
        udf_kwargs={"marker": marker, "rows_before_death": 3000},
    )
    assert os.path.exists(marker), "the first attempt of partition 1 did not die"
    assert result.partition_counts == [rows // 4] * 4
    if where == "local":
        assert sorted(os.listdir(out)) == ["00000", "00001", "00002", "00003", "index.json"]
        _check_rows(LocalDataset(out), rows)
    else:
        from astream.torch.dataset import StreamingDataset

        _check_rows(StreamingDataset(remote=out, local=str(tmp_path / "c"), batch_size=8), rows)


def test_rerun_into_non_empty_output(spark: Any, tmp_path: Path) -> None:
    df = sf.build(spark, rows=1000, partitions=2)
    out = tmp_path / "out"
    dataframe_to_mds(df, mds_kwargs={"out": str(out), "columns": {"i64": "int", "s": "str"}})
    before = (out / "index.json").read_bytes()
    with pytest.raises(OutputExistsError, match="exist_ok=True"):
        dataframe_to_mds(df, mds_kwargs={"out": str(out), "columns": {"i64": "int"}})
    assert (out / "index.json").read_bytes() == before
    small = sf.build(spark, rows=10, partitions=3)
    res = dataframe_to_mds(
        small, mds_kwargs={"out": str(out), "columns": {"i64": "int"}, "exist_ok": True}
    )
    assert sum(res.partition_counts) == 10 and len(res.partition_counts) == 3
    assert sorted(int(s["i64"]) for s in LocalDataset(str(out))) == list(range(10))
    assert sorted(os.listdir(out)) == ["00000", "00001", "00002", "index.json"]


def test_merge_index_false_leaves_parts_for_a_later_merge(spark: Any, tmp_path: Path) -> None:
    from astream.writer.merge import merge_index

    out = tmp_path / "out"
    df = sf.build(spark, rows=300, partitions=3)
    res = dataframe_to_mds(df, merge_index=False, mds_kwargs={"out": str(out)})
    assert res.partition_counts == [100, 100, 100]
    assert not (out / "index.json").exists()
    merge_index(str(out))
    assert [int(s["i64"]) for s in LocalDataset(str(out))] == list(range(300))


@pytest.mark.parametrize(
    ("exprs", "kwargs", "message"),
    [
        (["id", "id % 2 = 0 as flag"], {}, "column 'flag': Spark type boolean has no MDS"),
        (["id", "current_timestamp() as ts"], {}, "column 'ts': Spark type timestamp"),
        (["id"], {"columns": {"id": "str"}}, "column 'id' of Spark type bigint cannot be stored"),
        (["id"], {"columns": {"nope": "int"}}, "'nope' is not a column of the DataFrame"),
        (["id"], {"columns": {"id": "int64"}, "compression": "lzma"}, "compression"),
        (["id"], {"columns": {"id": "int64"}, "bogus": 1}, "unknown argument"),
        (["id"], {"columns": {"id": "int64"}, "size_limit": -5}, "size_limit"),
    ],
)
def test_bad_arguments_fail_before_any_job(
    spark: Any, tmp_path: Path, exprs: list[str], kwargs: dict[str, Any], message: str
) -> None:
    df = spark.range(0, 10, 1, 2).selectExpr(*exprs)
    out = tmp_path / "out"
    jobs = len(spark.sparkContext.statusTracker().getJobIdsForGroup())
    with pytest.raises(ConfigError, match=message):
        dataframe_to_mds(df, mds_kwargs={"out": str(out), **kwargs})
    assert not out.exists()
    assert len(spark.sparkContext.statusTracker().getJobIdsForGroup()) == jobs


def test_given_columns_and_missing_out(spark: Any, tmp_path: Path) -> None:
    df = sf.build(spark, rows=50, partitions=2)
    with pytest.raises(ConfigError, match=r"mds_kwargs\['out'\] is required"):
        dataframe_to_mds(df, mds_kwargs={"columns": {"i64": "int"}})
    with pytest.raises(ConfigError, match="udf_iterable, mds_kwargs"):
        dataframe_to_mds(df, mds_kwargs={"out": str(tmp_path / "o")}, udf_iterable=lambda p: [])
    with pytest.raises(ConfigError, match="empty"):
        dataframe_to_mds(df.limit(0), mds_kwargs={"out": str(tmp_path / "e")})
    out = tmp_path / "cols"
    cols = {"i64": "int", "a32": "ndarray:int32", "s": "json", "u16": "pkl", "bin": "jpeg"}
    dataframe_to_mds(df, mds_kwargs={"out": str(out), "columns": cols, "compression": None})
    index = json.loads((out / "index.json").read_text())
    assert index["shards"][0]["column_encodings"] == ["ndarray:int32", "jpeg", "int", "json", "pkl"]
    # A binary column's bytes are stored as they are (already-encoded images, pickles).
    shard = (out / index["shards"][0]["raw_data"]["basename"]).read_bytes()
    assert b"b0" in shard and b"b1" in shard
    cols.pop("bin")
    dataframe_to_mds(
        df, mds_kwargs={"out": str(out), "columns": cols, "compression": None, "exist_ok": True}
    )
    rows = sorted(LocalDataset(str(out), allow_unsafe_types=True), key=lambda s: s["i64"])
    assert set(rows[7]) == set(cols)
    assert rows[7]["s"] == "row-7xxxxxxx" and rows[7]["u16"] == 7
    assert rows[7]["a32"].tolist() == [7, 8, 9]


def test_cli_convert_engine_spark(spark: Any, tmp_path: Path) -> None:
    import argparse

    from astream.cli import convert

    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"id": i, "text": f"t{i}", "x": i / 2}) + "\n"
                           for i in range(500)))  # fmt: skip
    p = argparse.ArgumentParser()
    convert.add_parser(p.add_subparsers())
    out = tmp_path / "out"
    args = p.parse_args(["convert", str(src), str(out), "--engine", "spark", "--workers", "2",
                         "--size-limit", "4kb"])  # fmt: skip
    assert args.func(args) == 0
    rows = sorted(LocalDataset(str(out)), key=lambda s: int(s["id"]))
    assert [int(r["id"]) for r in rows] == list(range(500))
    assert rows[9]["text"] == "t9" and float(rows[9]["x"]) == 4.5
    with pytest.raises(OutputExistsError):
        args.func(p.parse_args(["convert", str(src), str(out), "--engine", "spark"]))
