"""The asyncio path decodes every sample of a planned batch, in the synchronous path's order,
also when one batch takes hundreds of samples from one shard (decoded in chunks of 128,
between which the loop may be given back)."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from astream import StreamingDataset
from astream.aio import AsyncStreamingDataset

from .conftest import write_dataset


def test_big_planned_batches_equal_the_sync_path(tmp_path: Any) -> None:
    path = str(tmp_path / "big")
    samples = write_dataset(path, 2_000, size_limit=1 << 22)  # a few shards of ~hundreds
    sync = StreamingDataset(local=path, batch_size=500, shuffle=True, shuffle_seed=3)
    want = [s["label"] for s in sync]

    async def main() -> list[list[Any]]:
        ds = AsyncStreamingDataset(local=path, batch_size=500, shuffle=True, shuffle_seed=3)
        return [b async for b in ds.aiter_batches()]

    batches = asyncio.run(main())
    assert [len(b) for b in batches] == [500] * 4
    got = [s["label"] for b in batches for s in b]
    assert got == want
    assert sorted(int(x) for x in got) == sorted(int(s["label"]) for s in samples)
    by_label = {int(s["label"]): s for s in samples}
    for s in (x for b in batches for x in b):
        ref = by_label[int(s["label"])]
        for k, v in ref.items():
            assert np.array_equal(np.asarray(s[k]), np.asarray(v)), k
