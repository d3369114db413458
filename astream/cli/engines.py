"""``astream convert --engine spark|ray``: the conversion run inside Spark or Ray Data.

Theory of operation
-------------------
The local engine (``--workers``) reads the input with astream's own sources. With ``--engine
spark`` the input path (a file or a prefix/folder of Parquet, JSONL or CSV files) is read by
Spark's own readers in a local ``SparkSession`` (``local[--workers]``; or the session that
``SPARK_REMOTE``/``spark-submit`` configured) and written by :func:`astream.spark.dataframe_to_mds`;
with ``--engine ray`` by ``ray.data.read_*`` and :class:`astream.ray.MDSDatasink`. Columns come
from ``--columns`` or are inferred (Spark: from the schema; Ray: from the first 1,000 rows, as
the local engine does). Folder and Hugging Face inputs have no engine reader: ConfigError.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from astream.cli.sources import infer_columns, parse_columns
from astream.errors import ConfigError

__all__ = ["run_engine"]

_EXT = {".parquet": "parquet", ".jsonl": "jsonl", ".json": "jsonl", ".csv": "csv"}


def _format(args: argparse.Namespace) -> str:
    fmt = args.format or _EXT.get(os.path.splitext(args.input.rstrip("/"))[1].lower())
    if fmt is None:
        raise ConfigError(f"--engine {args.engine}: give --format for input {args.input!r}")
    if fmt not in ("parquet", "jsonl", "csv"):
        raise ConfigError(f"--engine {args.engine} reads parquet, jsonl or csv, not {fmt!r}")
    return fmt


def _writer_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    hashes = [h.strip() for h in args.hashes.split(",") if h.strip()]
    kw: dict[str, Any] = {"hashes": hashes, "size_limit": args.size_limit}
    kw["compression"] = args.compression
    if args.exist_ok:
        kw["exist_ok"] = True
    return kw


def _spark(args: argparse.Namespace, fmt: str) -> list[int]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from astream.spark import dataframe_to_mds

    spark = (
        SparkSession.builder.master(f"local[{args.workers}]")
        .appName("astream convert")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    reader = spark.read
    if fmt == "parquet":
        df = reader.parquet(args.input)
    elif fmt == "jsonl":
        df = reader.json(args.input)
    else:
        df = reader.option("header", True).option("inferSchema", True).csv(args.input)
    if args.workers > 1:
        df = df.repartition(args.workers)
    kw = {"out": args.out, **_writer_kwargs(args)}
    if args.columns:
        kw["columns"] = parse_columns(args.columns)
    return list(dataframe_to_mds(df, mds_kwargs=kw).partition_counts)


def _ray(args: argparse.Namespace, fmt: str) -> list[int]:
    import ray

    from astream.ray import MDSDatasink

    if not ray.is_initialized():
        ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False)
    read = {"parquet": ray.data.read_parquet, "jsonl": ray.data.read_json}.get(fmt)
    ds = read(args.input) if read is not None else ray.data.read_csv(args.input)
    if args.columns:
        columns = parse_columns(args.columns)
    else:
        columns = infer_columns(ds.take(1000), from_text=False)
    if args.workers > 1:
        ds = ds.repartition(args.workers)
    kw = _writer_kwargs(args)
    sink = MDSDatasink(args.out, columns, exist_ok=kw.pop("exist_ok", False), **kw)
    ds.write_datasink(sink)
    return sink.partition_counts


def run_engine(args: argparse.Namespace) -> int:
    """Convert with ``args.engine``; print one summary line."""
    fmt = _format(args)
    counts = _spark(args, fmt) if args.engine == "spark" else _ray(args, fmt)
    print(
        f"converted {sum(counts)} samples ({fmt}, engine {args.engine}) in {len(counts)} "
        f"partitions at {args.out}"
    )
    return 0
