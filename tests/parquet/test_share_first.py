"""A cold DataLoader worker ``w`` fetches the whole shards of workers ``0..w-1``'s first
batches before its own (``Engine.share_first``): the loader hands out worker 0's batch first,
so the node's download slots go to it. Observed in real forked workers: every download a worker
starts is logged (worker id, shard) to a file, and worker 1's first downloads must be worker
0's first-batch row groups, in their order of first use; the epoch stays exact."""

from __future__ import annotations

import os
import uuid
from typing import Any

import pytest
from torch.utils.data import get_worker_info

from astream import StreamingDataLoader, StreamingDataset
from astream.core.world import World
from astream.runtime.batch_groups import batch_groups
from astream.runtime.engine import Engine
from astream.storage.sync import upload


def _logged(monkeypatch: pytest.MonkeyPatch, log: str) -> None:
    """Log every download started, in the forked workers too (they inherit the class)."""
    real = Engine.download

    async def download(self: Engine, s: int, block: bool, streams: Any = None) -> bool:
        info = get_worker_info()
        who = -1 if info is None else info.id
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{who} {s} {int(block)}\n".encode())
        finally:
            os.close(fd)
        return await real(self, s, block, streams)

    monkeypatch.setattr(Engine, "download", download)


def _read(log: str) -> list[tuple[int, int, int]]:
    with open(log) as f:
        return [tuple(int(x) for x in line.split()) for line in f]  # type: ignore[misc]


def _labels(batch: list[dict[str, Any]]) -> list[int]:
    return [int(s["label"]) for s in batch]


def _dataset(url: str, cache: str, endpoint: str, **kw: Any) -> StreamingDataset:
    return StreamingDataset(
        remote=url, local=cache, format="parquet", shuffle=True, shuffle_seed=7,
        batch_size=8, storage_options={"endpoint_url": endpoint}, **kw,
    )  # fmt: skip


@pytest.mark.parametrize("limit", [None, "10mb"])
def test_worker_one_fetches_worker_zeros_first_batch_first(
    pq_table: Any, s3_bucket: str, s3_server: Any, make_proxy: Any, tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch, limit: str | None,
) -> None:  # fmt: skip
    root, rows = pq_table
    url = f"{s3_bucket}/share-{uuid.uuid4().hex[:8]}"
    upload(root, url)
    log = str(tmp_path / "downloads.log")
    _logged(monkeypatch, log)
    proxy = make_proxy(s3_server.url)
    ds = _dataset(url, str(tmp_path / "c"), proxy.url, cache_limit=limit)
    # from now on each GET takes 1 s: worker 0 cannot have its first batch's row groups complete
    # before worker 1 starts (share_first leaves out what is already in the cache)
    proxy.configure(latency=1.0)
    plan = ds.plan(0)
    world = World(1, 1, 2)
    firsts = []
    for w in range(2):
        ids = next(iter(plan.worker_batches(world, 0, w, 0)))
        firsts.append([s for s, _p, _l in batch_groups(ids, ds.engine.catalog)])
    # the precondition that makes the check mean something: the workers start apart
    assert firsts[0][0] != firsts[1][0] and set(firsts[0]) != set(firsts[1])
    loader = StreamingDataLoader(ds, batch_size=8, num_workers=2, collate_fn=_labels)
    labels = [x for b in loader for x in b]
    assert sorted(labels) == [r["label"] for r in rows]  # the epoch is exact
    one = [s for who, s, _block in _read(log) if who == 1]
    if limit is None:
        assert one[: len(firsts[0])] == firsts[0]
    else:  # under a cache_limit a worker fetches only for itself: its own first batch first
        assert one[0] == firsts[1][0]
