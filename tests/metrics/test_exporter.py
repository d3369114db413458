"""The Prometheus endpoint, scraped by a real HTTP client while real DataLoader workers read a
dataset from a real HTTP server (through the fault proxy); values checked against
``Metrics.snapshot()`` and the dataset's own bytes, exactly where the counters are final."""

from __future__ import annotations

import os
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from astream import Stream, StreamingDataLoader, StreamingDataset
from astream.errors import ConfigError
from astream.metrics import COUNTERS, PREFETCH, Metrics, process_record, registry

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=30) as r:
        assert r.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        text = r.read().decode()
    out: Samples = {}
    for fam in text_string_to_metric_families(text):  # the reference parser checks the syntax
        for s in fam.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            assert key not in out, f"duplicate series {key}"
            out[key] = s.value
    return out


def total(samples: Samples, name: str, **match: str) -> float:
    return sum(
        v
        for (n, labels), v in samples.items()
        if n == name and all(dict(labels).get(k) == w for k, w in match.items())
    )


def workers_of(samples: Samples, name: str) -> set[str]:
    return {dict(labels)["worker"] for (n, labels), _ in samples.items() if n == name}


def _labels(batch: list[dict[str, Any]]) -> list[int]:
    return [int(s["label"]) for s in batch]


def _shards(path: str) -> int:
    return len([f for f in os.listdir(path) if f.startswith("shard.")])


def test_scrape_during_epoch_with_two_workers(
    http_ds, http_root, http_server, make_proxy, tmp_path
):
    name, nbytes = http_ds(800)
    proxy = make_proxy(http_server.url, latency=0.01)
    # two transient faults, retried by some worker ("reset" is left to test_retry_cause.py:
    # aiohttp itself retries a reset on a reused connection, so the count would depend on that)
    proxy.plan("503", "truncate", path="shard.")
    remote = f"{proxy.url}/{name}"
    ds = StreamingDataset(remote=remote, local=str(tmp_path / "cache"), batch_size=10)
    with Metrics(ds, interval=0.1, prometheus_port=0) as m:
        m.cache_scan_every = 0.0
        loader = StreamingDataLoader(
            ds, batch_size=10, num_workers=2, collate_fn=_labels, worker_init_fn=m.worker_init_fn
        )
        labels: list[int] = []
        mid: Samples | None = None
        for i, batch in enumerate(loader):
            labels += batch
            if i == 10:
                deadline = time.monotonic() + 20
                # both workers have reported samples (records are up to `interval` s old)
                while time.monotonic() < deadline and not (
                    len(m.workers()) == 2
                    and all(r["counters"]["samples"] > 0 for r in m.worker_records())
                ):
                    time.sleep(0.05)
                mid = scrape(str(m.url))
        assert sorted(labels) == list(range(800))
        end = scrape(str(m.url))
        snap = m.snapshot()
        workers = m.worker_records()

    assert mid is not None
    assert workers_of(mid, "astream_samples_total") == {"main", "0", "1"}
    assert 0 < total(mid, "astream_samples_total") < 800
    for w in ("0", "1"):  # counters only grow
        assert total(mid, "astream_samples_total", worker=w) <= total(
            end, "astream_samples_total", worker=w
        )

    # at the end every worker wrote its final record: the scrape equals the snapshot exactly
    for c in COUNTERS:
        assert total(end, f"astream_{c}_total") == snap[c], c
    assert snap["samples"] == 800 and snap["processes"] == 3
    assert total(end, "astream_samples_total", worker="main") == 0
    assert snap["bytes_fetched"] == nbytes  # every shard once, nothing else counted
    assert snap["shards_fetched"] == _shards(os.path.join(http_root, name))
    assert total(end, "astream_stream_samples_total", stream="0") == 800
    assert total(end, "astream_stream_bytes_fetched_total", stream="0") == nbytes
    assert total(end, "astream_retries_total") == 2
    assert total(end, "astream_retries_by_cause_total", cause="5xx") == 1
    assert total(end, "astream_retries_by_cause_total", cause="truncated") == 1
    assert dict(proxy.stats.faults) == {"503": 1, "truncate": 1}
    assert sum(sum(r["retry_causes"].values()) for r in workers) == 2
    for g in PREFETCH:  # the epoch is over: nothing in flight, nothing ahead
        assert total(end, f"astream_prefetch_{g}") == 0, g
    assert total(end, "astream_cache_bytes") == nbytes
    assert total(end, "astream_processes") == 3
    info = [dict(lb) for (n, lb), v in end.items() if n == "astream_stream_info" and v == 1]
    assert info == [
        {"rank": "0", "stream": "0", "remote": remote, "local": str(tmp_path / "cache")}
    ]


def test_retries_by_cause_in_process(http_ds, http_server, make_proxy, tmp_path):
    name, _ = http_ds(300)
    proxy = make_proxy(http_server.url)
    proxy.plan("503", "truncate", "500", "truncate", path="shard.")
    ds = StreamingDataset(
        remote=f"{proxy.url}/{name}",
        local=str(tmp_path / "cache"),
        batch_size=10,
        download_retry=8,
    )
    with Metrics(ds, prometheus_port=0, announce=False) as m:
        assert sorted(int(s["label"]) for s in ds) == list(range(300))
        end = scrape(str(m.url))
    assert dict(proxy.stats.faults) == {"503": 1, "truncate": 2, "500": 1}
    got = {
        dict(lb)["cause"]: v for (n, lb), v in end.items() if n == "astream_retries_by_cause_total"
    }
    assert got == {"5xx": 2, "truncated": 2}
    assert ds.stats.retries == 4 == total(end, "astream_retries_total")


def test_two_streams_labelled(http_ds, http_server, tmp_path):
    a, bytes_a = http_ds(200)
    b, bytes_b = http_ds(300, first=200)
    ds = StreamingDataset(
        streams=[
            Stream(remote=f"{http_server.url}/{a}", local=str(tmp_path / "a")),
            Stream(remote=f"{http_server.url}/{b}", local=str(tmp_path / "b")),
        ],
        batch_size=10,
        shuffle=True,
    )
    with Metrics(ds, prometheus_port=0, announce=False) as m:
        assert sorted(int(s["label"]) for s in ds) == list(range(500))
        end = scrape(str(m.url))
    rec = process_record(ds, None)
    assert rec["streams"] == [
        {"samples": 200, "bytes_fetched": bytes_a},
        {"samples": 300, "bytes_fetched": bytes_b},
    ]
    assert total(end, "astream_stream_samples_total", stream="0") == 200
    assert total(end, "astream_stream_samples_total", stream="1") == 300
    assert total(end, "astream_stream_bytes_fetched_total", stream="1") == bytes_b
    assert total(end, "astream_bytes_fetched_total") == bytes_a + bytes_b


async def test_two_streams_counted_by_aiter(http_ds, http_server, tmp_path):
    a, _ = http_ds(120)
    b, _ = http_ds(80, first=120)
    ds = StreamingDataset(
        streams=[
            Stream(remote=f"{http_server.url}/{a}", local=str(tmp_path / "a")),
            Stream(remote=f"{http_server.url}/{b}", local=str(tmp_path / "b")),
        ],
        batch_size=10,
    )
    got = [int(s["label"]) async for s in ds.aiter()]
    assert sorted(got) == list(range(200))
    assert [s["samples"] for s in process_record(ds, None)["streams"]] == [120, 80]


def test_prefetch_depth_mid_epoch(http_ds, http_server, make_proxy, tmp_path):
    name, _ = http_ds(600)
    proxy = make_proxy(http_server.url, latency=0.3)
    ds = StreamingDataset(
        remote=f"{proxy.url}/{name}", local=str(tmp_path / "cache"), batch_size=10
    )
    sizes = {e.raw_data.bytes for e in ds.engine.catalog.entries}
    it = iter(ds)
    # 0.3 s a request: mid-epoch, the next shards are still coming. Sampled after each of the
    # first samples: the first wave of downloads (started together once the first batch is
    # planned) may all land with the first shard, so one snapshot alone would race with it
    taken = 0
    for _ in range(200):
        next(it)
        taken += 1
        p = process_record(ds, None)["prefetch"]
        if p["shards_in_flight"] >= 1:
            break
    assert p["samples_ahead"] > 0
    assert p["shards_in_flight"] >= 1
    assert min(sizes) * p["shards_in_flight"] <= p["bytes_in_flight"]
    assert p["bytes_in_flight"] <= max(sizes) * p["shards_in_flight"]
    with Metrics(ds, announce=False) as m:  # the endpoint's text carries the same gauges
        from prometheus_client.parser import text_string_to_metric_families as parse

        ahead = [
            s.value
            for fam in parse(m.prometheus_text())
            for s in fam.samples
            if s.name == "astream_prefetch_samples_ahead"
        ]
        assert ahead == [process_record(ds, None)["prefetch"]["samples_ahead"]] and ahead[0] > 0
    rest = [int(s["label"]) for s in it]
    assert len(rest) == 600 - taken
    assert process_record(ds, None)["prefetch"] == dict.fromkeys(PREFETCH, 0)


def test_cache_limit_evictions_and_occupancy(http_ds, http_server, tmp_path):
    name, nbytes = http_ds(600)
    ds = StreamingDataset(
        remote=f"{http_server.url}/{name}",
        local=str(tmp_path / "cache"),
        batch_size=10,
        cache_limit=nbytes // 4,
    )
    with Metrics(ds, prometheus_port=0, announce=False) as m:
        m.cache_scan_every = 0.0
        loader = StreamingDataLoader(
            ds, batch_size=10, num_workers=2, collate_fn=_labels, worker_init_fn=m.worker_init_fn
        )
        assert sorted(x for b in loader for x in b) == list(range(600))
        end = scrape(str(m.url))
        snap = m.snapshot()
    assert snap["evictions"] > 0
    assert total(end, "astream_evictions_total") == snap["evictions"]
    assert total(end, "astream_cache_limit_bytes") == nbytes // 4
    assert 0 < total(end, "astream_cache_bytes") <= nbytes // 4


def _metrics_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("astream-metrics")]


def test_metrics_off_no_thread_no_server_and_close_cleans_up(tmp_path, runtime_dir):
    from tests.metrics.conftest import write_ds

    write_ds(str(tmp_path / "d"), 100)
    ds = StreamingDataset(local=str(tmp_path / "d"), batch_size=10)
    assert len(list(ds)) == 100
    assert _metrics_threads() == []  # no Metrics: no thread, no port, nothing registered
    assert not os.path.exists(runtime_dir)

    m = Metrics(ds, prometheus_port=0)
    url = str(m.url)
    assert sorted(_metrics_threads()) == ["astream-metrics", "astream-metrics-http"]
    assert [j.directory for j in registry.jobs()] == [m.directory]
    assert scrape(url)[("astream_samples_total", (("rank", "0"), ("worker", "main")))] == 100
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(url.replace("/metrics", "/other"), timeout=10)
    assert e.value.code == 404
    m.close()
    assert _metrics_threads() == []
    assert not os.path.exists(m.directory) and registry.jobs() == []
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url, timeout=10)


def test_bad_port_is_a_config_error(tmp_path):
    from tests.metrics.conftest import write_ds

    write_ds(str(tmp_path / "d"), 10)
    ds = StreamingDataset(local=str(tmp_path / "d"), batch_size=10)
    with pytest.raises(ConfigError, match=r"^prometheus_port must be an int in 0\.\.65535"):
        Metrics(ds, prometheus_port=70000)
    with pytest.raises(ConfigError, match=r"^prometheus_port must be an int"):
        Metrics(ds, prometheus_port="9400")  # type: ignore[arg-type]
    with Metrics(ds, prometheus_port=0, announce=False) as m:
        taken = m.exporter.port
        with pytest.raises(ConfigError, match=rf"^prometheus_port={taken}: cannot listen on "):
            Metrics(ds, prometheus_port=taken, announce=False)
        with pytest.raises(ConfigError, match=r"^this Metrics already serves http://127\.0\.0\.1"):
            m.serve(0)
    assert _metrics_threads() == []


def test_retries_are_counted_per_dataset_and_per_process(
    http_ds, http_server, make_proxy, tmp_path
):
    """Another dataset's retries (another remote, the same settings) are not this one's, and a
    DataLoader worker does not count again the retries its parent made before the fork."""
    name, _ = http_ds(100)
    proxy = make_proxy(http_server.url)
    proxy.plan("503", "503", path="shard.")
    remote = f"{proxy.url}/{name}"
    a = StreamingDataset(remote=remote, local=str(tmp_path / "a"), batch_size=10)
    assert sum(1 for _ in a) == 100
    assert dict(proxy.stats.faults) == {"503": 2} and a.stats.retries == 2
    other, _ = http_ds(100)
    b = StreamingDataset(
        remote=f"{http_server.url}/{other}", local=str(tmp_path / "b"), batch_size=10
    )
    assert sum(1 for _ in b) == 100
    assert b.stats.retries == 0 and a.stats.retries == 2
    # the same remote again, in two forked workers, nothing failing now: the job's total is
    # the parent's two, not two more per worker
    again = StreamingDataset(remote=remote, local=str(tmp_path / "again"), batch_size=10)
    with Metrics(again, interval=0.1, prometheus_port=0, announce=False) as m:
        loader = StreamingDataLoader(
            again, batch_size=10, num_workers=2, collate_fn=_labels, worker_init_fn=m.worker_init_fn
        )
        assert sorted(x for batch in loader for x in batch) == list(range(100))
        end = scrape(str(m.url))
    assert workers_of(end, "astream_samples_total") == {"main", "0", "1"}
    assert total(end, "astream_retries_total") == 2
