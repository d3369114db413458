"""Rows of pandas DataFrames and Arrow tables as MDS samples, for the Spark and Ray writers.

Theory of operation
-------------------
Both engines hand a task its rows as batches: pandas DataFrames (Spark's ``mapInPandas``) or
Arrow tables / pandas DataFrames (Ray Data blocks). :func:`frame_samples` turns one batch into
sample dicts column-wise: each column is converted once (``Series.tolist()``, or Arrow's
``to_numpy``/``to_pylist``), then rows are zipped, which is several times cheaper than pandas'
``to_dict('records')`` on wide frames. Values keep the types the MDS encodings accept: Python
ints/floats/str/bytes/Decimal, and numpy arrays for list columns (converted to the dtype the
column's ``ndarray:DTYPE`` encoding names, so an Arrow list of int32 becomes an int32 array).

Nulls have no MDS representation: a null in a column is a ConfigError naming the column and
the row, instead of a NaN silently stored as a number.

:func:`drop_empty_output` clears a local output that a run wrote no sample into (before the
engine writer raises EmptyDatasetError), so an empty run leaves no sub-datasets behind.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from astream.errors import ConfigError

__all__ = ["drop_empty_output", "frame_samples"]


def _array_dtype(encoding: str) -> Any:
    if encoding.startswith("ndarray:"):
        return np.dtype(encoding.split(":")[1])
    return None


def _column(values: Any, name: str, encoding: str) -> list[Any]:
    """One column as a list of encodable values."""
    dtype = _array_dtype(encoding)
    if hasattr(values, "to_pylist"):  # an Arrow array
        if values.null_count:
            _null(name, values.is_null().to_pylist().index(True))
        if dtype is not None:
            return [np.asarray(v, dtype) for v in values.to_pylist()]
        return list(values.to_pylist())
    # a float NaN may be a value, not a null -- except in a column stored as integers, where it
    # is how pandas shows a null of an integral Spark column
    if values.hasnans and (values.dtype.kind != "f" or _integral(encoding)):
        _null(name, int(np.flatnonzero(values.isna().to_numpy())[0]))
    out: list[Any] = values.tolist()
    if dtype is not None:
        out = [v if isinstance(v, np.ndarray) and v.dtype == dtype else np.asarray(v, dtype)
               for v in out]  # fmt: skip
    return out


def _integral(encoding: str) -> bool:
    return encoding.startswith(("int", "uint")) and ":" not in encoding


def _null(name: str, row: int) -> None:
    raise ConfigError(f"column {name!r}: row {row} of the batch is null; MDS has no null value")


def frame_samples(frame: Any, columns: Mapping[str, str]) -> Iterator[dict[str, Any]]:
    """The samples of one pandas DataFrame or Arrow table, restricted to ``columns``."""
    if len(frame) == 0:
        return  # an empty block (Ray gives one after a filter) may lack every column
    names = list(columns)
    present = set(frame.column_names if hasattr(frame, "column_names") else frame.columns)
    missing = [n for n in names if n not in present]
    if missing:
        raise ConfigError(f"columns {missing} are not in the data (it has {sorted(present)})")
    cols = [_column(frame[n], n, columns[n]) for n in names]
    for values in zip(*cols):
        yield dict(zip(names, values))


def drop_empty_output(out: Any) -> None:
    """Delete what a run that wrote no sample left in its local output directory: the
    writers' ``check_output`` emptied or created it when the run started, so all of it is
    this run's (empty sub-datasets, hidden attempt directories). A remote output keeps its
    empty sub-datasets' index files (the store protocol has no delete)."""
    from astream.writer.output import split_out

    local, _ = split_out(out)
    if local is None or not os.path.isdir(local):
        return
    for entry in os.listdir(local):
        path = os.path.join(local, entry)
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
