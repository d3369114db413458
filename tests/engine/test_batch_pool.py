"""Batches decoded in this process reuse their buffers (``batchdecode.POOL``): a batch the
consumer dropped lends its buffer to a later one, a batch it keeps is never overwritten, and
a reused buffer's padding is zeros again."""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
import pytest

from astream import StreamingDataset
from astream.core import batchdecode

from .test_batches import check_batch, collated, write


@pytest.fixture(autouse=True)
def pool_every_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """These batches are small: pool them all the same."""
    monkeypatch.setattr(batchdecode.POOL, "min_bytes", 0)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Any]:
    path = str(tmp_path_factory.mktemp("pool") / "all")
    write(path, 240, seed=3)
    return path, collated(path)


@pytest.mark.parametrize("ragged", ["pad", "offsets"])
def test_dropped_batches_lend_their_buffer_held_ones_never(data: Any, ragged: str) -> None:
    path, reference = data
    gc.collect()
    made = batchdecode.POOL.made
    ds = StreamingDataset(local=path, batch_size=16, shuffle=True)
    n = 0
    for k, batch in enumerate(ds.batches(ragged=ragged, batch_format="torch")):
        check_batch(batch, reference[k], ragged)  # checked, then dropped
        n += 1
    assert n == len(reference) == 15
    assert batchdecode.POOL.made - made <= 2  # one buffer, or two while the next decodes
    ds = StreamingDataset(local=path, batch_size=16, shuffle=True)
    held = list(ds.batches(ragged=ragged))  # all alive at once: each its own buffer
    assert batchdecode.POOL.made - made >= len(reference) - batchdecode.POOL.keep
    for batch, chunk in zip(held, reference):
        check_batch(batch, chunk, ragged)
    bases = {b["label"].base.__array_interface__["data"][0] for b in held}
    assert len(bases) == len(held)
    del held, batch
    gc.collect()
    assert len(batchdecode.POOL.free) <= batchdecode.POOL.keep


def test_views_keep_the_buffer(data: Any) -> None:
    """Only the last view going releases a buffer: a slice kept from a dropped batch stays
    intact while later batches decode."""
    path, _ = data
    ds = StreamingDataset(local=path, batch_size=16, shuffle=True)
    it = ds.batches(ragged="offsets")
    first = next(it)
    kept = first["ids"][:5]
    want = kept.copy()
    del first
    for _ in it:
        pass
    assert np.array_equal(kept, want)
