"""Fixtures for the metrics suite: small MDS datasets served over HTTP (through a FaultProxy
when a test wants faults or latency), and a private runtime directory per test so that
``astream top`` sees only the test's own jobs."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from astream import MDSWriter

COLUMNS = {"label": "int", "pad": "bytes"}


def write_ds(path: str, n: int, *, first: int = 0, size_limit: int = 4000) -> int:
    """``n`` samples labelled ``first..first+n-1`` (~400 bytes each); returns the shard bytes."""
    with MDSWriter(out=path, columns=COLUMNS, size_limit=size_limit) as w:
        for i in range(first, first + n):
            w.write({"label": i, "pad": bytes([i % 251]) * 400})
    return sum(
        os.path.getsize(os.path.join(path, f)) for f in os.listdir(path) if f.startswith("shard.")
    )


@pytest.fixture(autouse=True)
def runtime_dir(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    d = str(tmp_path / "runtime")
    monkeypatch.setenv("ASTREAM_RUNTIME_DIR", d)
    return d


@pytest.fixture
def http_ds(http_root: str, http_server: Any) -> Callable[..., tuple[str, int]]:
    """``http_ds(n, first=0)``: a dataset published on the HTTP server; (its path, shard
    bytes). The remote URL is ``<server or proxy url>/<path>``."""

    def make(n: int, *, first: int = 0) -> tuple[str, int]:
        name = f"m-{uuid.uuid4().hex[:8]}"
        nbytes = write_ds(os.path.join(http_root, name), n, first=first)
        return name, nbytes

    return make
