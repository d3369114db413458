"""Random access promotes a shard to a whole download by bytes spent on ranges (rent-or-buy),
counted exactly at the fault/counting proxy."""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import Any

import numpy as np
import pytest

from astream import MDSWriter, StreamingDataset
from astream.aio import AsyncStreamingDataset
from astream.core.shard import header_size
from astream.storage.sync import download_key, upload

COLUMNS = {"blob": "bytes", "label": "int"}
N = 300


@pytest.fixture(scope="module")
def big_shards(s3_bucket: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """300 samples of 1-3 KB in 3 shards of ~200 KB, on the S3 emulator."""
    path = str(tmp_path_factory.mktemp("promo") / "ds")
    rng = np.random.default_rng(5)
    with MDSWriter(out=path, columns=COLUMNS, size_limit=210_000) as w:
        for i in range(N):
            w.write({"blob": rng.bytes(int(rng.integers(1000, 3000))), "label": i})
    url = f"{s3_bucket}/promo-{uuid.uuid4().hex[:8]}"
    upload(path, url)
    return url


def _offsets(ds: Any, s: int, tmp: Any) -> list[int]:
    """The shard's sample offsets, from a copy read straight from storage (not the cache)."""
    entry = ds.shards[s]
    path = str(tmp / f"copy{s}")
    download_key(ds.catalog.shards[s].url().rsplit("/", 1)[0], entry.raw_data.basename, path)
    with open(path, "rb") as f:
        raw = f.read()
    n = entry.samples
    return [int.from_bytes(raw[4 + 4 * k : 8 + 4 * k], "little") for k in range(n + 1)]


def test_sparse_random_access_never_downloads_a_shard(
    big_shards: str, s3_server: Any, make_proxy: Any, tmp_path: Any
) -> None:
    proxy = make_proxy(s3_server.url)
    local = str(tmp_path / "cache")
    ds = StreamingDataset(
        remote=big_shards, local=local, batch_size=4, storage_options={"endpoint_url": proxy.url}
    )
    assert len(ds.shards) == 3, [e.samples for e in ds.shards]
    offs = {s: _offsets(ds, s, tmp_path) for s in range(3)}
    picks = [int(i) for i in np.random.default_rng(1).choice(N, 20, replace=False)]
    proxy.reset_stats()
    got = [ds[i]["label"] for i in picks]
    assert got == picks
    touched = {ds.catalog.locate_one(i)[0] for i in picks}
    want = sum(header_size(ds.shards[s].samples) for s in touched)
    for i in picks:
        s, li = ds.catalog.locate_one(i)
        want += offs[s][li + 1] - offs[s][li]
    # exactly: one header per shard touched and each sample's bytes, nothing else
    assert proxy.stats.total_requests == len(touched) + len(picks)
    assert proxy.stats.total_bytes == want
    assert want < sum(ds.shards[s].raw_data.bytes for s in touched) / 2
    print(
        f"\n[random-sparse] {len(picks)} reads over {len(touched)} shards of "
        f"{sum(ds.shards[s].raw_data.bytes for s in touched)} B: {proxy.stats.total_requests} "
        f"GETs, {want} B ({want / len(picks):.0f} B per read), 0 shards downloaded"
    )
    for s in range(3):
        assert not os.path.exists(os.path.join(local, ds.shards[s].raw_data.basename))
    assert ds.stats.shards_fetched == 0


@pytest.mark.parametrize("api", ["sync", "async"])
def test_a_shard_is_bought_when_its_ranges_cost_its_size(
    big_shards: str, s3_server: Any, make_proxy: Any, tmp_path: Any, api: str
) -> None:
    proxy = make_proxy(s3_server.url)
    local = str(tmp_path / "cache")
    cls = StreamingDataset if api == "sync" else AsyncStreamingDataset
    ds = cls(
        remote=big_shards, local=local, batch_size=4, storage_options={"endpoint_url": proxy.url}
    )
    s = 1
    entry = ds.shards[s]
    size = entry.raw_data.bytes
    first = int(ds.catalog.starts[s])
    off = _offsets(ds, s, tmp_path)
    # Reads with repeats (ranges are not cached: one pass over every sample costs less than the
    # shard, which has a config too, so only re-reads reach the price). The last read before the
    # price is chosen so that the header's bytes decide it: the rent counts every byte moved.
    hdr = header_size(entry.samples)
    sz = [off[i + 1] - off[i] for i in range(entry.samples)]
    rng = np.random.default_rng(2)
    order: list[int] = []
    spent = hdr
    while True:
        gap = size - spent
        fits = [li for li in range(entry.samples) if gap <= sz[li] < gap + hdr]
        if fits and gap <= max(sz):
            order.append(fits[0])
            spent += sz[fits[0]]
            break
        li = int(rng.integers(0, entry.samples))
        if spent + sz[li] >= size:
            continue  # would cross without the header deciding it
        order.append(li)
        spent += sz[li]
    k_buy = len(order) - 1
    assert spent >= size > spent - hdr and entry.samples < k_buy < 2 * entry.samples
    order += [int(k) for k in rng.integers(0, entry.samples, entry.samples)]
    raw = os.path.join(local, entry.raw_data.basename)
    proxy.reset_stats()

    async def read(idx: list[int]) -> list[int]:
        out = [(await ds.aget(first + li))["label"] for li in idx]
        await ds.aclose()
        return out

    def get(idx: list[int]) -> list[int]:
        if api == "sync":
            return [ds[first + li]["label"] for li in idx]
        return asyncio.run(read(idx))

    # renting: every read up to the one that pays the price is a range, nothing downloaded
    assert get(order[:k_buy]) == [first + li for li in order[:k_buy]]
    assert not os.path.exists(raw)
    assert proxy.stats.total_requests == 1 + k_buy
    if api == "async":
        # the rest in one loop: the read that reaches the price starts the download, and the
        # reads after it wait for it and are local
        assert get(order[k_buy:]) == [first + li for li in order[k_buy:]]
    else:
        assert get(order[k_buy : k_buy + 1]) == [first + order[k_buy]]
        assert get(order[k_buy + 1 :]) == [first + li for li in order[k_buy + 1 :]]
    assert os.path.getsize(raw) == size
    # exactly: the header, the samples up to the buying read, then the shard once
    assert proxy.stats.total_bytes == spent + size
    assert proxy.stats.total_requests == 1 + (k_buy + 1) + 1
    assert spent + size <= 2 * size + max(sz)
    print(
        f"\n[random-dense {api}] shard of {size} B: bought after {k_buy + 1} range reads "
        f"({spent} B of ranges), total {spent + size} B = {(spent + size) / size:.2f}x the shard"
    )
    proxy.reset_stats()
    assert get(order[:5]) == [first + li for li in order[:5]]
    assert proxy.stats.total_requests == 0
