"""Parquet tables written by pyarrow for the streaming tests: several files with different
row-group sizes, nulls, nested lists, binary and dictionary-encoded strings."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

# (rows, row_group_size) per file: row groups of 7, 16 and 40 rows, and a one-group file
LAYOUT = [(30, 7), (50, 16), (80, 40), (10, 100)]


def make_rows(start: int, n: int) -> list[dict[str, Any]]:
    rows = []
    for i in range(start, start + n):
        rows.append(
            {
                "label": i,
                "img": None if i % 7 == 3 else bytes([i % 251]) * (1 + i % 13),
                "tok": None if i % 5 == 2 else np.arange(i, i + i % 9, dtype=np.int32),
                "txt": ["cat", "dog", "owl"][i % 3] if i % 11 else None,
                "nest": [[i], [i + 1, i + 2]] if i % 2 else [],
                "score": float(i) / 4,
            }
        )
    return rows


def table_of(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.table(
        {
            "label": pa.array([r["label"] for r in rows], pa.int64()),
            "img": pa.array([r["img"] for r in rows], pa.binary()),
            "tok": pa.array(
                [None if r["tok"] is None else r["tok"].tolist() for r in rows],
                pa.list_(pa.int32()),
            ),
            "txt": pa.array([r["txt"] for r in rows], pa.string()).dictionary_encode(),
            "nest": pa.array([r["nest"] for r in rows], pa.list_(pa.list_(pa.int64()))),
            "score": pa.array([r["score"] for r in rows], pa.float64()),
        }
    )


def write_table(root: str, layout: list[tuple[int, int]] = LAYOUT, prefix: str = "part",
                start: int = 0) -> list[dict[str, Any]]:  # fmt: skip
    """Write one ``{prefix}-{k}.parquet`` per layout entry under ``root``; the rows, in order."""
    os.makedirs(root, exist_ok=True)
    out: list[dict[str, Any]] = []
    for k, (n, rg) in enumerate(layout):
        rows = make_rows(start + len(out), n)
        pq.write_table(table_of(rows), os.path.join(root, f"{prefix}-{k}.parquet"),
                       row_group_size=rg, compression="zstd")  # fmt: skip
        out += rows
    return out


def same(got: dict[str, Any], want: dict[str, Any]) -> bool:
    """Equal as samples: numpy arrays by dtype and values, everything else by ==."""
    if set(got) != set(want):
        return False
    for k, v in want.items():
        g = got[k]
        if isinstance(v, np.ndarray):
            if not (isinstance(g, np.ndarray) and g.dtype == v.dtype and np.array_equal(g, v)):
                return False
        elif type(g) is not type(v) or g != v:
            return False
    return True


@pytest.fixture(scope="session")
def pq_table(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[dict[str, Any]]]:
    """170 rows in 4 files (5 + 4 + 2 + 1 = 12 row groups), written once per session."""
    root = str(tmp_path_factory.mktemp("pq") / "table")
    return root, write_table(root)


@pytest.fixture
def fresh(tmp_path: Any) -> Callable[[str], str]:
    def make(name: str = "cache") -> str:
        return os.path.join(str(tmp_path), name)

    return make


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The keys whose footers are read, in order (the Parquet index's footer reads)."""
    from astream.parquet import io_footers

    got: list[str] = []
    real = io_footers.read_footer

    async def counting(store: Any, info: Any, *rest: Any) -> Any:
        got.append(info.key)
        return await real(store, info, *rest)

    monkeypatch.setattr(io_footers, "read_footer", counting)
    return got
