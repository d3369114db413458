"""Fixtures for the streaming engine: small MDS datasets, local and uploaded to emulators."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from astream import MDSWriter
from astream.storage.sync import upload

COLUMNS = {"ids": "ndarray:uint16", "label": "int", "text": "str"}


def make_samples(n: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        ids = rng.integers(0, 60000, size=int(rng.integers(4, 40))).astype(np.uint16)
        out.append({"ids": ids, "label": i, "text": f"sample-{i}"})
    return out


def write_dataset(
    path: str,
    n: int,
    *,
    size_limit: int = 16_000,
    compression: str | None = None,
    hashes: list[str] | None = None,
    seed: int = 0,
) -> list[dict[str, Any]]:
    samples = make_samples(n, seed)
    with MDSWriter(
        out=path,
        columns=COLUMNS,
        size_limit=size_limit,
        compression=compression,
        hashes=hashes,
    ) as w:
        for s in samples:
            w.write(s)
    return samples


@pytest.fixture(scope="session")
def local_dataset(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[dict[str, Any]]]:
    """1,000 samples in ~10 shards, uncompressed, written once per session."""
    path = str(tmp_path_factory.mktemp("ds") / "plain")
    return path, write_dataset(path, 1000)


@pytest.fixture(scope="session")
def s3_dataset(
    s3_bucket: str, local_dataset: tuple[str, list[dict[str, Any]]]
) -> tuple[str, list[dict[str, Any]]]:
    """The local dataset uploaded to the S3 emulator; returns its URL."""
    path, samples = local_dataset
    url = f"{s3_bucket}/plain-{uuid.uuid4().hex[:8]}"
    upload(path, url)
    return url, samples


@pytest.fixture
def fresh_local(tmp_path: Any) -> Callable[[str], str]:
    def make(name: str = "cache") -> str:
        return os.path.join(str(tmp_path), name)

    return make


def labels(samples: Any) -> list[int]:
    return [int(s["label"]) for s in samples]
