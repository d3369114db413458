"""``dataframe_to_mds``: write a Spark DataFrame as MDS, one sub-dataset per partition.

Theory of operation
-------------------
Same signature and semantics as ``streaming.base.converters.dataframe_to_mds``. On the driver,
before any job: the DataFrame must not be empty, ``mds_kwargs['out']`` is required, columns are
inferred from the schema or checked against it (:mod:`astream.integrations.spark_types`; with a
``udf_iterable`` the given columns are taken as they are, since the UDF may make new ones),
every MDSWriter argument is validated by building a writer on a temp directory, compression
defaults to ``zstd`` as in the reference, and a non-empty output is refused unless
``mds_kwargs['exist_ok']`` is true.

The job is one ``mapInPandas`` over the DataFrame's partitions. Each task turns its pandas
batches into samples (:func:`~astream.integrations.frames.frame_samples`, or the user's
``udf_iterable(pdf, **udf_kwargs)``) and writes them with
:func:`~astream.writer.parts.write_part` as ``out/<partition>``: local output is published by
an atomic rename of an attempt-specific directory; remote output (``s3://``, ``gs://``,
``az://``) is uploaded while the task writes, index.json last. The task returns one row
(partition, samples, index URL). Spark keeps one successful attempt per partition in
``collect()``, and the driver merges exactly those (:func:`~astream.writer.parts.finish_parts`),
so a retried or speculative attempt never adds samples twice.

Return value: the reference returns ``(local, remote)``; so does this, as a tuple whose
``partition_counts`` attribute lists the samples written by each partition, in order.

An empty DataFrame is an EmptyDatasetError before any job; so is a job whose ``udf_iterable``
made no sample at all (its empty local parts are removed, nothing is merged).

Worker python: Spark's Python workers run the interpreter the SparkContext read from
``PYSPARK_PYTHON`` when it started, ``python3`` on PATH by default -- outside a virtual
environment that python lacks astream (and often pandas). When nothing chose it (no
``PYSPARK_PYTHON``, no ``spark.pyspark.python`` or ``spark.executorEnv.PYSPARK_PYTHON``) and the
master is local (the workers run on this machine), this job's UDF is built with this process's
interpreter, which imports astream and matches the driver's Python version; the context's
setting is restored right after, so later UDFs of the caller are unaffected. Any explicit
setting, and any cluster master, is left alone: there, the executors' python must have astream
installed, and a task that cannot import it fails with a ConfigError saying so.

Errors inside tasks: Spark re-raises a task's exception as a PythonException carrying the
task's traceback as text; one whose last exception is an astream error is raised as that error
(same type, same message), so ``except ConfigError`` works around a Spark job as it does
around a local writer.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any

from astream import errors
from astream.errors import AstreamError, ConfigError, EmptyDatasetError
from astream.integrations.frames import drop_empty_output, frame_samples
from astream.integrations.spark_types import check_columns, infer_columns
from astream.writer.output import split_out
from astream.writer.parts import (
    PartResult,
    check_output,
    finish_parts,
    validate_writer_kwargs,
    write_part,
)

__all__ = ["MDSPath", "dataframe_to_mds"]

logger = logging.getLogger(__name__)

_RESULT_SCHEMA = "partition int, samples long, index_url string"


class MDSPath(tuple):  # type: ignore[type-arg]
    """``(local, remote)`` as the reference returns it, plus ``partition_counts``."""

    partition_counts: list[int]

    def __new__(cls, local: str, remote: str, counts: list[int]) -> MDSPath:
        self = super().__new__(cls, (local, remote))
        self.partition_counts = counts
        return self


def _explicit_python(sc: Any) -> bool:
    if os.environ.get("PYSPARK_PYTHON"):
        return True
    conf = sc.getConf()
    return any(conf.get(k) for k in ("spark.pyspark.python", "spark.executorEnv.PYSPARK_PYTHON"))


@contextlib.contextmanager
def _worker_python(dataframe: Any) -> Iterator[None]:
    """While building the job's UDF: this interpreter as the workers' python, where nothing
    chose one and the master is local (see the module docstring)."""
    try:
        sc = dataframe.sparkSession.sparkContext
        default = getattr(sc, "pythonExec", None) == "python3"
        local = str(sc.master).startswith("local")
    except Exception:  # Spark Connect: no SparkContext here; the server decides
        sc = None
    if sc is None or not default or not local or _explicit_python(sc):
        yield
        return
    sc.pythonExec = sys.executable
    try:
        yield
    finally:
        sc.pythonExec = "python3"


_TASK_ERROR = re.compile(r"^astream\.errors\.(\w+): (.+)$", re.M)
_NO_ASTREAM = re.compile(r"^ModuleNotFoundError: No module named 'astream'", re.M)


def _task_error(exc: Exception, dataframe: Any) -> AstreamError | None:
    """The astream error a failed task raised, from a PythonException's text; None if it is
    not one (a user's UDF error, an engine failure)."""
    if not type(exc).__module__.startswith(("pyspark", "py4j")):
        return None
    text = str(exc)
    found = _TASK_ERROR.findall(text)
    if found:
        name, message = found[-1]
        cls = getattr(errors, name, None)
        if isinstance(cls, type) and issubclass(cls, AstreamError):
            try:
                return cls(message)
            except TypeError:
                return AstreamError(message)
    if _NO_ASTREAM.search(text):
        try:
            python = dataframe.sparkSession.sparkContext.pythonExec
        except Exception:
            python = "the executors' python"
        return ConfigError(
            f"Spark's Python workers ({python}) cannot import astream: install astream for "
            "that python, or point PYSPARK_PYTHON / spark.pyspark.python at one that has it"
        )
    return None


def _prepare(
    dataframe: Any, mds_kwargs: dict[str, Any], udf_iterable: Callable[..., Any] | None
) -> dict[str, Any]:
    if "out" not in mds_kwargs or not mds_kwargs["out"]:
        raise ConfigError("mds_kwargs['out'] is required (a path, a URL or a (local, remote) pair)")
    kwargs = dict(mds_kwargs)
    kwargs.setdefault("compression", "zstd")
    if udf_iterable is not None:
        if not callable(udf_iterable):
            raise ConfigError(f"udf_iterable must be callable, got {udf_iterable!r}")
        if "columns" not in kwargs:
            raise ConfigError("with udf_iterable, mds_kwargs['columns'] is required")
    elif "columns" in kwargs:
        kwargs["columns"] = check_columns(dataframe.schema, kwargs["columns"])
    else:
        kwargs["columns"] = infer_columns(dataframe.schema)
        logger.info("dataframe_to_mds: inferred columns %s", kwargs["columns"])
    validate_writer_kwargs({k: v for k, v in kwargs.items() if k != "exist_ok"})
    return kwargs


def dataframe_to_mds(
    dataframe: Any,
    merge_index: bool = True,
    mds_kwargs: dict[str, Any] | None = None,
    udf_iterable: Callable[..., Any] | None = None,
    udf_kwargs: dict[str, Any] | None = None,
) -> MDSPath:
    """Write ``dataframe`` as MDS at ``mds_kwargs['out']``; see the module docstring."""
    from pyspark import TaskContext

    if dataframe is None:
        raise ConfigError("dataframe: got None")
    if not hasattr(dataframe, "mapInPandas"):
        raise ConfigError(f"dataframe must be a pyspark DataFrame, got {type(dataframe).__name__}")
    if udf_kwargs is not None and not isinstance(udf_kwargs, dict):
        raise ConfigError(f"udf_kwargs must be a dict, got {udf_kwargs!r}")
    kwargs = _prepare(dataframe, dict(mds_kwargs or {}), udf_iterable)
    if dataframe.isEmpty():
        raise EmptyDatasetError("dataframe is empty: no rows to write")
    out = kwargs.pop("out")
    exist_ok = bool(kwargs.pop("exist_ok", False))
    local, remote = check_output(out, exist_ok)
    columns = kwargs["columns"]
    extra = dict(udf_kwargs or {})

    def write(batches: Iterator[Any]) -> Iterator[Any]:
        import pandas as pd

        ctx = TaskContext.get()
        if ctx is None:
            raise RuntimeError("dataframe_to_mds: no Spark TaskContext in the task")

        def samples() -> Iterator[Any]:
            for pdf in batches:
                if udf_iterable is not None:
                    yield from udf_iterable(pdf, **extra)
                else:
                    yield from frame_samples(pdf, columns)

        res = write_part(samples(), out, ctx.partitionId(), kwargs, str(ctx.taskAttemptId()))
        yield pd.DataFrame(
            {"partition": [res.index], "samples": [res.samples], "index_url": [res.index_url]}
        )

    try:
        with _worker_python(dataframe):
            rows = dataframe.mapInPandas(write, schema=_RESULT_SCHEMA).collect()
    except Exception as exc:
        err = _task_error(exc, dataframe)
        if err is None:
            raise
        raise err from exc
    results = [PartResult(r["partition"], r["samples"], r["index_url"]) for r in rows]
    if not any(r.samples for r in results):
        drop_empty_output(out)
        why = "the job wrote no sample" if udf_iterable is None else "udf_iterable made none"
        raise EmptyDatasetError(f"no rows to write: {why}")
    counts = finish_parts(out, results, merge_index)
    _, remote = split_out(out)
    return MDSPath(local or "", remote or "", counts)
