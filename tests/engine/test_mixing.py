"""Mixed datasets through the engine: Stream weights, stratified batches, mixed remotes."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import pytest

from astream import LocalDataset, Stream, StreamingDataLoader, StreamingDataset
from astream.errors import ConfigError
from astream.storage.sync import upload

from .conftest import write_dataset


@pytest.fixture(scope="module")
def two_sets(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    a = str(tmp_path_factory.mktemp("mix") / "a")
    b = str(tmp_path_factory.mktemp("mix") / "b")
    write_dataset(a, 400, seed=3)
    write_dataset(b, 100, seed=4)
    return a, b


def _key(sample: dict[str, Any]) -> tuple[str, bytes]:
    return sample["text"], sample["ids"].tobytes()


def test_stratified_batches_hold_exact_proportions(two_sets: tuple[str, str]) -> None:
    a, b = two_sets
    ds = StreamingDataset(
        streams=[Stream(local=a, proportion=0.75), Stream(local=b, proportion=0.25)],
        epoch_size=400,
        batch_size=8,
        shuffle=True,
        batching_method="stratified",
    )
    loader = StreamingDataLoader(ds, batch_size=8, num_workers=2, collate_fn=lambda x: x)
    batches = list(loader)
    assert len(batches) == 50
    b_keys = {_key(s) for s in LocalDataset(b)}
    for batch in batches:  # exactly 2 of every 8 come from stream b
        assert len(batch) == 8
        assert sum(_key(s) in b_keys for s in batch) == 2


def test_proportions_mix_local_and_s3(
    two_sets: tuple[str, str], s3_bucket: str, tmp_path: Any
) -> None:
    a, b = two_sets
    url = f"{s3_bucket}/mixb-{uuid.uuid4().hex[:8]}"
    upload(b, url)
    ds = StreamingDataset(
        streams=[
            Stream(local=a, repeat=0.5),
            Stream(remote=url, local=str(tmp_path / "b"), repeat=2),
        ],
        batch_size=10,
        shuffle=True,
    )
    got = list(ds)
    assert len(got) == 200 + 200  # half of a, twice b
    counts = Counter(_key(s) for s in got)
    b_keys = {_key(s) for s in LocalDataset(b)}
    assert {k for k, c in counts.items() if c == 2} == b_keys  # every b sample exactly twice
    assert sum(1 for c in counts.values() if c == 1) == 200  # half of a, each once


def test_bad_mix_is_named(two_sets: tuple[str, str]) -> None:
    a = two_sets[0]
    with pytest.raises(ConfigError, match="give at most one of proportion, repeat, choose"):
        Stream(local=a, proportion=0.5, repeat=2)
