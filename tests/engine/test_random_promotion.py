"""Random access promotes a shard to a whole download by the time spent on its ranged reads
(rent-or-buy in time), and keeps the samples it read by range in memory; requests and bytes
counted exactly at the fault/counting proxy, in front of moto's S3."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from typing import Any

import numpy as np
import pytest

from astream import MDSWriter, StreamingDataset
from astream.aio import AsyncStreamingDataset
from astream.core.shard import header_size
from astream.errors import ConfigError
from astream.storage.sync import download_key, upload

COLUMNS = {"blob": "bytes", "label": "int"}
N = 300
SLOW = 250_000  # bytes/s through the proxy: a 200 KB shard costs ~0.8 s whole


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


def _dataset(url: str, proxy: Any, local: str, cls: Any = StreamingDataset, **kw: Any) -> Any:
    ds = cls(
        remote=url,
        local=local,
        batch_size=4,
        storage_options={"endpoint_url": proxy.url},
        **kw,
    )
    assert len(ds.shards) == 3, [e.samples for e in ds.shards]
    return ds


def _wholes(proxy: Any, ds: Any) -> list[int]:
    """The shards downloaded whole through ``proxy`` (a GET of all their bytes)."""
    out = []
    for s, e in enumerate(ds.shards):
        full = f"bytes=0-{e.raw_data.bytes - 1}"
        if any(p.endswith(e.raw_data.basename) and r == full for p, r in proxy.stats.ranges):
            out.append(s)
    return out


def _teach(ds: Any, proxy: Any, s: int) -> float:
    """Read shard ``s`` until it is bought, so the engine has measured the store's bandwidth
    (one whole download through ``proxy``); returns the bandwidth it learned."""
    first = int(ds.catalog.starts[s])
    for li in range(ds.shards[s].samples):
        assert ds[first + li]["label"] == first + li
        if s in _parts(ds).bought:
            break
    # a sample not read yet waits for the download (one read already is in memory)
    assert ds[first + li + 1]["label"] == first + li + 1
    raw = os.path.join(ds.catalog.sources[0].local, ds.shards[s].raw_data.basename)
    assert os.path.getsize(raw) == ds.shards[s].raw_data.bytes
    return float(_costs(ds).bandwidth)


def _parts(ds: Any) -> Any:
    return ds.engine._parts()


def _costs(ds: Any) -> Any:
    (costs,) = _parts(ds).costs.values()
    return costs


def _price(ds: Any, s: int) -> float:
    return float(_costs(ds).price(ds.shards[s].raw_data.bytes))


def test_sparse_reads_of_costly_shards_are_ranges_kept_in_memory(
    big_shards: str, s3_server: Any, make_proxy: Any, tmp_path: Any
) -> None:
    proxy = make_proxy(s3_server.url, bandwidth=SLOW)
    local = str(tmp_path / "cache")
    ds = _dataset(big_shards, proxy, local)
    learned = _teach(ds, proxy, 0)
    assert SLOW / 3 < learned < SLOW * 3, learned  # the proxy's cap, not the seed (64 MiB/s)
    offs = {s: _offsets(ds, s, tmp_path) for s in (1, 2)}
    rng = np.random.default_rng(1)
    picks = [
        int(ds.catalog.starts[s]) + int(li)
        for s in (1, 2)
        for li in rng.choice(ds.shards[s].samples, 6, False)
    ]
    proxy.reset_stats()
    got = [ds[i]["label"] for i in picks]
    assert got == picks
    want = sum(header_size(ds.shards[s].samples) for s in (1, 2))
    for i in picks:
        s, li = ds.catalog.locate_one(i)
        want += offs[s][li + 1] - offs[s][li]
    # exactly: one header per shard touched and each sample's bytes, nothing else
    assert proxy.stats.total_requests == 2 + len(picks)
    assert proxy.stats.total_bytes == want
    rent = dict(_parts(ds).range_rent)
    for s in (1, 2):
        assert 0 < rent[s] < _price(ds, s)  # the rule: renting is still cheaper than buying
        assert not os.path.exists(os.path.join(local, ds.shards[s].raw_data.basename))
    assert _wholes(proxy, ds) == []
    print(
        f"\n[random-sparse] {len(picks)} reads over 2 shards at {learned / 1e3:.0f} kB/s: "
        f"{proxy.stats.total_requests} GETs, {want} B; rent {rent[1]:.3f}/{rent[2]:.3f} s "
        f"against a price of {_price(ds, 1):.3f} s; 0 shards downloaded"
    )
    # the second pass over the same samples: all from memory, no request, no rent
    proxy.reset_stats()
    assert [ds[i]["label"] for i in reversed(picks)] == picks[::-1]
    assert [ds[i]["blob"] for i in picks[:2]] == [ds[i]["blob"] for i in picks[:2]]
    assert proxy.stats.total_requests == 0
    assert _parts(ds).range_rent == rent
    assert ds.stats.shards_fetched == 1  # the taught one


@pytest.mark.parametrize("api", ["sync", "async"])
def test_a_shard_is_bought_once_its_ranges_took_its_download_time(
    big_shards: str, s3_server: Any, make_proxy: Any, tmp_path: Any, api: str
) -> None:
    proxy = make_proxy(s3_server.url, bandwidth=4 * SLOW, latency=0.02)
    local = str(tmp_path / "cache")
    cls = StreamingDataset if api == "sync" else AsyncStreamingDataset
    ds = _dataset(big_shards, proxy, local, cls)
    _teach(ds, proxy, 0)
    s = 1
    size = ds.shards[s].raw_data.bytes
    first = int(ds.catalog.starts[s])
    off = _offsets(ds, s, tmp_path)
    order = [int(k) for k in np.random.default_rng(2).permutation(ds.shards[s].samples)]
    raw = os.path.join(local, ds.shards[s].raw_data.basename)
    parts = _parts(ds)
    proxy.reset_stats()

    async def read(li: int) -> int:
        if api == "sync":
            return int(ds[first + li]["label"])
        return int((await ds.aget(first + li))["label"])

    async def rent_then_buy() -> tuple[int, list[int]]:
        # renting: each read adds its measured time (at most its wall time); no read buys
        # while the rent stays under the price, and the one that reaches it buys
        k = 0
        while s not in parts.bought:
            before = parts.range_rent.get(s, 0.0)
            t0 = time.perf_counter()
            assert await read(order[k]) == first + order[k]
            wall = time.perf_counter() - t0
            k += 1
            if s in parts.bought:
                rent, price = parts.bought[s]
                assert before < rent <= before + wall and rent >= price
                assert parts.range_rent[s] == 0.0
                break
            assert before < parts.range_rent[s] <= before + wall
            assert parts.range_rent[s] < _price(ds, s)
            assert not os.path.exists(raw) and _wholes(proxy, ds) == []
        # the reads after the buying one wait for its download and are local
        rest = [await read(li) for li in order[k:]]
        if api == "async":
            await ds.aclose()
        return k, rest

    k_buy, rest = asyncio.run(rent_then_buy())
    assert rest == [first + li for li in order[k_buy:]]
    assert 1 < k_buy < ds.shards[s].samples // 2, k_buy
    assert os.path.getsize(raw) == size
    # exactly: the header, the samples up to the buying read, then the shard once
    spent = header_size(ds.shards[s].samples) + sum(off[li + 1] - off[li] for li in order[:k_buy])
    assert proxy.stats.total_bytes == spent + size
    assert proxy.stats.total_requests == 1 + k_buy + 1
    assert _wholes(proxy, ds) == [s]
    print(
        f"\n[random-dense {api}] shard of {size} B, price {parts.bought[s][1]:.3f} s: bought "
        f"at read {k_buy} ({spent} B of ranges), total {spent + size} B"
    )
    proxy.reset_stats()
    assert [ds[first + li]["label"] for li in order[:5]] == [first + li for li in order[:5]]
    assert proxy.stats.total_requests == 0


def _reads_to_buy(url: str, proxy: Any, local: str, s: int) -> int:
    ds = _dataset(url, proxy, local)
    _teach(ds, proxy, 0)
    first = int(ds.catalog.starts[s])
    for k in range(ds.shards[s].samples):
        assert ds[first + k]["label"] == first + k
        if s in _parts(ds).bought:  # decided: its download starts in the background
            return k + 1
    raise AssertionError("never bought")  # pragma: no cover


def test_latency_buys_sooner(
    big_shards: str, s3_server: Any, make_proxy: Any, tmp_path: Any
) -> None:
    """The same shard at the same bandwidth (2 MB/s: ~0.1 s whole): with 0.2 s more per
    request, its header and first sample already took longer than its download, so the first
    sample read buys it; at loopback latency several samples are read first."""
    near = make_proxy(s3_server.url, bandwidth=8 * SLOW)
    quick = _reads_to_buy(big_shards, near, str(tmp_path / "a"), 1)
    far = make_proxy(s3_server.url, bandwidth=8 * SLOW, latency=0.2)
    slow = _reads_to_buy(big_shards, far, str(tmp_path / "b"), 1)
    print(f"\n[random-latency] reads before buying: {quick} at loopback, {slow} at +0.2 s/request")
    assert slow == 1 < quick


def test_the_memory_tier_keeps_the_latest_samples_within_its_bound(
    big_shards: str, s3_server: Any, make_proxy: Any, tmp_path: Any
) -> None:
    proxy = make_proxy(s3_server.url, bandwidth=SLOW)
    bound = 10_000
    ds = _dataset(big_shards, proxy, str(tmp_path / "cache"), random_memory=bound)
    _teach(ds, proxy, 0)
    memo = _parts(ds).memo
    s = 2
    first = int(ds.catalog.starts[s])
    off = _offsets(ds, s, tmp_path)
    size = {li: off[li + 1] - off[li] for li in range(ds.shards[s].samples)}
    read = [int(li) for li in np.random.default_rng(3).choice(ds.shards[s].samples, 9, False)]
    for j, li in enumerate(read):
        assert ds[first + li]["label"] == first + li
        assert memo.nbytes <= bound
        kept: list[int] = []  # the latest reads that fit, newest first
        for lj in reversed(read[: j + 1]):
            if sum(size[x] for x in kept) + size[lj] > bound:
                break
            kept.append(lj)
        assert sorted(k for _, k in memo._items) == sorted(kept)
        assert memo.nbytes == sum(size[x] for x in kept)
    proxy.reset_stats()
    assert ds[first + read[-1]]["label"] == first + read[-1]
    assert proxy.stats.total_requests == 0  # kept
    assert ds[first + read[0]]["label"] == first + read[0]
    assert proxy.stats.total_requests == 1  # pushed out by newer ones: a range again


@pytest.mark.parametrize("bad", [-1, 2**46 + 1, "64MB", 1.5, True, None])
def test_random_memory_refuses_bad_values(big_shards: str, s3_server: Any, bad: Any) -> None:
    with pytest.raises(ConfigError, match=r"random_memory must be an int of bytes in 0\.\."):
        StreamingDataset(remote=big_shards, local="/nonexistent-never-made", random_memory=bad)


def test_two_hundred_reads_again_make_no_request(
    big_shards: str, s3_server: Any, make_proxy: Any, tmp_path: Any
) -> None:
    proxy = make_proxy(s3_server.url)
    ds = _dataset(big_shards, proxy, str(tmp_path / "cache"), AsyncStreamingDataset)
    picks = [int(i) for i in np.random.default_rng(4).integers(0, N, 200)]

    async def both() -> tuple[list[int], int, list[int]]:
        one = [int((await ds.aget(i))["label"]) for i in picks]
        n = proxy.stats.total_requests
        proxy.reset_stats()
        two = [int((await ds.aget(i))["label"]) for i in picks]
        await ds.aclose()
        return one, n, two

    t0 = time.perf_counter()
    one, n, two = asyncio.run(both())
    assert one == picks and two == picks
    assert proxy.stats.total_requests == 0
    print(f"\n[random-200] first pass {n} requests, second 0; {time.perf_counter() - t0:.2f} s")
