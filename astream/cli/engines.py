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

The output holds the input's rows in input order, as with the local engine: files by path, rows
in file order. Ray reads and repartitions in order. Spark's file scan does not (it packs files
largest first, and ``repartition`` deals rows round-robin), so each row gets a key (file path,
split offset, ``monotonically_increasing_id``, which grows within a split) and the frame is
range-partitioned on it into ``--workers`` partitions, each sorted: partition k holds a
contiguous run of the input, and the partitions are merged in order.

Errors follow the CLI's contract (one line, exit 2): a local input that does not exist is a
ConfigError before any engine starts; an astream error raised inside a task comes back as
itself, on one line; an input the engine's reader cannot parse (Ray's JSON reader wants one
type per column) is a FormatError naming the input; any other engine failure an AstreamError
with the engine's first line. A bug in astream still shows its traceback. Ray Data logs a
failed task's traceback (and tips) on the console: its console handlers are muted while the
CLI runs it (Ray's session log files keep everything); progress bars of either engine show
only with ``--progress`` (or a terminal), like the local engine's.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from typing import Any

from astream.cli.sources import infer_columns, parse_columns
from astream.errors import AstreamError, ConfigError, EmptyDatasetError, FormatError

__all__ = ["run_engine"]

_EXT = {".parquet": "parquet", ".jsonl": "jsonl", ".json": "jsonl", ".csv": "csv"}


def _format(args: argparse.Namespace) -> str:
    fmt = args.format or _EXT.get(os.path.splitext(args.input.rstrip("/"))[1].lower())
    if fmt is None:
        raise ConfigError(f"--engine {args.engine}: give --format for input {args.input!r}")
    if fmt not in ("parquet", "jsonl", "csv"):
        raise ConfigError(f"--engine {args.engine} reads parquet, jsonl or csv, not {fmt!r}")
    return fmt


def _check_input(args: argparse.Namespace) -> None:
    """A local input must exist (as for the local engine); remote ones are the engine's."""
    if "://" in args.input and not args.input.startswith("file://"):
        return
    path = os.path.abspath(os.path.expanduser(args.input.removeprefix("file://")))
    if not os.path.exists(path):
        raise ConfigError(f"input: {path!r} does not exist")
    args.input = path


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
        .config("spark.ui.showConsoleProgress", str(_progress(args)).lower())
        .getOrCreate()
    )
    # a failed task's error comes back as one line; the JVM's own log of it would be pages
    spark.sparkContext.setLogLevel("FATAL")
    reader = spark.read
    if fmt == "parquet":
        df = reader.parquet(args.input)
    elif fmt == "jsonl":
        df = reader.json(args.input)
    else:
        df = reader.option("header", True).option("inferSchema", True).csv(args.input)
    if not df.columns:
        raise EmptyDatasetError("the input has no rows")  # an empty file: no schema either
    df = _in_input_order(df, args.workers)
    kw = {"out": args.out, **_writer_kwargs(args)}
    if args.columns:
        kw["columns"] = parse_columns(args.columns)
    return list(dataframe_to_mds(df, mds_kwargs=kw).partition_counts)


def _in_input_order(df: Any, n: int) -> Any:
    """``df`` (a file scan) as ``n`` partitions holding contiguous runs of the input, in
    order (see the module docstring)."""
    from pyspark.sql import functions as F

    meta = df.metadataColumn("_metadata") if hasattr(df, "metadataColumn") else F.col("_metadata")
    keys = ["__astream_file", "__astream_split", "__astream_row"]
    keyed = df.select(
        "*",
        meta.getField("file_path").alias(keys[0]),
        meta.getField("file_block_start").alias(keys[1]),
        F.monotonically_increasing_id().alias(keys[2]),
    )
    return keyed.repartitionByRange(n, *keys).sortWithinPartitions(*keys).drop(*keys)


def _progress(args: argparse.Namespace) -> bool:
    progress = getattr(args, "progress", None)
    return sys.stderr.isatty() if progress is None else bool(progress)


@contextlib.contextmanager
def _quiet_ray_console() -> Iterator[None]:
    """Mute the console (not file) handlers of Ray's loggers; restore them after."""
    muted: list[tuple[logging.Handler, int]] = []
    for name in ("ray", "ray.data"):
        for h in logging.getLogger(name).handlers:
            if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler):
                muted.append((h, h.level))
                h.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for h, level in muted:
            h.setLevel(level)


def _ray(args: argparse.Namespace, fmt: str) -> list[int]:
    import ray
    import ray.data

    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = _progress(args)
    # rows in input order: Ray Data hands blocks on as they finish unless told to keep their
    # order, so a loaded machine could write the second file's rows first
    kept = ctx.execution_options.preserve_order
    ctx.execution_options.preserve_order = True
    try:
        with _quiet_ray_console():
            if not ray.is_initialized():
                ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False)
            return _ray_write(args, fmt)
    finally:
        ctx.execution_options.preserve_order = kept


def _ray_write(args: argparse.Namespace, fmt: str) -> list[int]:
    import ray

    from astream.ray import MDSDatasink

    read = {"parquet": ray.data.read_parquet, "jsonl": ray.data.read_json}.get(fmt)
    ds = read(args.input) if read is not None else ray.data.read_csv(args.input)
    if args.columns:
        columns = parse_columns(args.columns)
    else:
        first = ds.take(1000)
        if not first:
            raise EmptyDatasetError("the input has no rows")
        columns = infer_columns(first, from_text=False)
    if args.workers > 1:
        ds = ds.repartition(args.workers)
    kw = _writer_kwargs(args)
    sink = MDSDatasink(args.out, columns, exist_ok=kw.pop("exist_ok", False), **kw)
    ds.write_datasink(sink)
    return sink.partition_counts


def run_engine(args: argparse.Namespace) -> int:
    """Convert with ``args.engine``; print one summary line."""
    fmt = _format(args)
    _check_input(args)
    try:
        counts = _spark(args, fmt) if args.engine == "spark" else _ray(args, fmt)
    except EmptyDatasetError:
        raise EmptyDatasetError(f"input: {args.input!r} is empty: no rows to write") from None
    except Exception as exc:
        err = _engine_error(exc, args.engine, args.input, fmt)
        if err is None:
            raise
        raise err from None
    print(
        f"converted {sum(counts)} samples ({fmt}, engine {args.engine}) in {len(counts)} "
        f"partitions at {args.out}"
    )
    return 0


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    line = lines[0].strip() if lines else ""
    return (line[:300] + "...") if len(line) > 300 else line or type(exc).__name__


def _from_engine(exc: BaseException) -> bool:
    """Raised by Ray, Spark or py4j (checked without importing an engine not in use)."""
    for module, name in (
        ("ray.exceptions", "RayError"),
        ("pyspark.errors", "PySparkException"),
        ("py4j.protocol", "Py4JError"),
    ):
        cls = getattr(sys.modules.get(module), name, None)
        if isinstance(cls, type) and isinstance(exc, cls):
            return True
    return False


def _engine_error(exc: Exception, engine: str, path: str, fmt: str) -> AstreamError | None:
    """``exc`` from an engine run as one-line astream error; None: not the engine's (a bug,
    re-raised as it is)."""
    if not _from_engine(exc):
        return None
    # Ray re-raises a task's exception as RayTaskError(<its type>), its text the task's whole
    # traceback; the task's own exception is ``cause``
    cause = getattr(exc, "cause", None)
    inner: BaseException = cause if isinstance(cause, BaseException) else exc
    line = _first_line(inner)
    if isinstance(inner, AstreamError):
        try:
            return type(inner)(line)
        except TypeError:
            return AstreamError(line)
    what = f"{type(inner).__name__}: {line}"
    if isinstance(inner, ValueError):  # JSON / Arrow / CSV parse errors, bad UTF-8
        hint = ""
        if engine == "ray" and fmt == "jsonl":
            hint = (
                "; Ray's JSON reader needs one type per column (--engine local stores a column "
                "of mixed types as json)"
            )
        return FormatError(f"--engine {engine} cannot read it ({what}){hint}", path)
    return AstreamError(f"--engine {engine} failed on {path!r}: {what}")
