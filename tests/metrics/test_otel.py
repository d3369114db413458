"""The other two exporters of the same families: OpenTelemetry instruments read by the SDK's
in-memory reader while real DataLoader workers read a dataset from a real HTTP server, and a
``prometheus_client`` collector. Both must carry exactly the series the Prometheus endpoint
serves (same names, labels and values once the counters are final), consistent with
``ds.stats`` and ``Metrics.snapshot()``."""

from __future__ import annotations

import sys
import time
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import Gauge, InMemoryMetricReader, Sum
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from astream import StreamingDataLoader, StreamingDataset
from astream.errors import ConfigError
from astream.metrics import COUNTERS, Metrics
from astream.metrics.families import CATALOGUE
from tests.metrics.test_exporter import Samples, scrape, total

Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def collect(reader: InMemoryMetricReader) -> tuple[Series, dict[str, Any]]:
    """Every astream data point the reader collects now, keyed like a Prometheus scrape
    (a counter's name with ``_total``), and each instrument's data kind."""
    data = reader.get_metrics_data()
    out: Series = {}
    kinds: dict[str, Any] = {}
    if data is None:
        return out, kinds
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            assert sm.scope.name == "astream"
            for metric in sm.metrics:
                kinds[metric.name] = metric.data
                counter = isinstance(metric.data, Sum)
                name = f"{metric.name}_total" if counter else metric.name
                for p in metric.data.data_points:
                    key = (name, tuple(sorted((k, str(v)) for k, v in p.attributes.items())))
                    assert key not in out, f"duplicate series {key}"
                    out[key] = p.value
    return out, kinds


def _labels(batch: list[dict[str, Any]]) -> list[int]:
    return [int(s["label"]) for s in batch]


def test_otel_meter_during_epoch_with_two_workers(http_ds, http_server, make_proxy, tmp_path):
    name, nbytes = http_ds(600)
    proxy = make_proxy(http_server.url, latency=0.01)
    proxy.plan("503", path="shard.")  # one retried fault: retries by cause show up too
    ds = StreamingDataset(
        remote=f"{proxy.url}/{name}", local=str(tmp_path / "cache"), batch_size=10
    )
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    with Metrics(ds, interval=0.1, prometheus_port=0, otel=provider) as m:
        m.cache_scan_every = 0.0
        loader = StreamingDataLoader(
            ds, batch_size=10, num_workers=2, collate_fn=_labels, worker_init_fn=m.worker_init_fn
        )
        labels: list[int] = []
        mid: Series = {}
        for i, batch in enumerate(loader):
            labels += batch
            if i == 10:
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline and not (
                    len(m.workers()) == 2
                    and all(r["counters"]["samples"] > 0 for r in m.worker_records())
                ):
                    time.sleep(0.05)
                mid, _ = collect(reader)
        assert sorted(labels) == list(range(600))
        end, kinds = collect(reader)
        prom: Samples = scrape(str(m.url))
        snap = m.snapshot()
        main_samples = ds.stats.samples
    after, _ = collect(reader)

    # mid-epoch: both workers and the main process report, part of the epoch counted
    assert {dict(lb)["worker"] for (n, lb) in mid if n == "astream_samples_total"} == {
        "main",
        "0",
        "1",
    }
    assert 0 < total(mid, "astream_samples_total") < 600
    for w in ("0", "1"):
        assert total(mid, "astream_samples_total", worker=w) <= total(
            end, "astream_samples_total", worker=w
        )
    # every family of the catalogue is an instrument of the right kind
    assert set(kinds) == {f.name for f in CATALOGUE if f.name != "astream_cache_limit_bytes"}
    for fam in CATALOGUE:
        if fam.name in kinds:
            data = kinds[fam.name]
            if fam.kind == "counter":
                assert isinstance(data, Sum) and data.is_monotonic, fam.name
            else:
                assert isinstance(data, Gauge), fam.name
    # the end: the same series as the Prometheus endpoint, value for value
    assert end == prom
    for c in COUNTERS:
        assert total(end, f"astream_{c}_total") == snap[c], c
    assert snap["samples"] == 600 and snap["processes"] == 3
    assert total(end, "astream_samples_total", worker="main") == main_samples == 0
    assert total(end, "astream_bytes_fetched_total") == nbytes
    assert total(end, "astream_retries_by_cause_total", cause="5xx") == 1
    assert total(end, "astream_cache_bytes") == nbytes
    # closed: the instruments stay registered (the API cannot remove them) and report nothing
    assert after == {}


def test_otel_global_provider_and_bad_values(tmp_path, monkeypatch):
    from opentelemetry import metrics as otel_metrics

    from tests.metrics.conftest import write_ds

    write_ds(str(tmp_path / "d"), 50)
    ds = StreamingDataset(local=str(tmp_path / "d"), batch_size=10)
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    monkeypatch.setattr(otel_metrics, "get_meter_provider", lambda: provider)
    with Metrics(ds, otel=True, announce=False):
        assert len(list(ds)) == 50
        got, _ = collect(reader)
    assert got[("astream_samples_total", (("rank", "0"), ("worker", "main")))] == 50

    with pytest.raises(ConfigError, match=r"^otel must be True \(the global MeterProvider\)"):
        Metrics(ds, otel="yes", announce=False)


def test_otel_not_installed_is_a_config_error(tmp_path, monkeypatch, runtime_dir):
    import os

    from tests.metrics.conftest import write_ds

    write_ds(str(tmp_path / "d"), 10)
    ds = StreamingDataset(local=str(tmp_path / "d"), batch_size=10)
    for mod in [m for m in sys.modules if m == "opentelemetry" or m.startswith("opentelemetry.")]:
        monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # as if not installed
    with pytest.raises(ConfigError, match=r"^otel needs OpenTelemetry, which is not installed: "):
        Metrics(ds, otel=True)
    assert not os.path.exists(runtime_dir)  # refused before anything was started or written
    with Metrics(ds, announce=False) as m:  # without otel= nothing imports it
        assert m.otel is None


def test_prometheus_client_collector(tmp_path):
    from tests.metrics.conftest import write_ds

    write_ds(str(tmp_path / "d"), 120)
    ds = StreamingDataset(local=str(tmp_path / "d"), batch_size=10, cache_limit=1 << 30)
    with Metrics(ds, prometheus_port=0, announce=False) as m:
        assert len(list(ds)) == 120
        registry = CollectorRegistry()
        collector = m.collector()
        registry.register(collector)
        text = generate_latest(registry).decode()
        ours = scrape(str(m.url))
    theirs: Samples = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            theirs[(s.name, tuple(sorted(s.labels.items())))] = s.value
    assert theirs == ours
    assert theirs[("astream_samples_total", (("rank", "0"), ("worker", "main")))] == 120
    assert theirs[("astream_cache_limit_bytes", (("rank", "0"),))] == 1 << 30
    assert generate_latest(registry) == b""  # closed: nothing reported


def test_rank_label_from_env(tmp_path, monkeypatch):
    """Rank 1 of 2 (RANK/WORLD_SIZE as torchrun sets them): half the samples, and every
    series of both exporters carries rank="1"."""
    from tests.metrics.conftest import write_ds

    for k, v in {
        "RANK": "1",
        "WORLD_SIZE": "2",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2",
    }.items():
        monkeypatch.setenv(k, v)
    write_ds(str(tmp_path / "d"), 100)
    ds = StreamingDataset(local=str(tmp_path / "d"), batch_size=10)
    reader = InMemoryMetricReader()
    with Metrics(ds, prometheus_port=0, announce=False, otel=MeterProvider([reader])) as m:
        assert len(list(ds)) == 50
        prom = scrape(str(m.url))
        otel, _ = collect(reader)
    assert otel == prom
    assert {dict(lb)["rank"] for (_, lb) in prom} == {"1"}
    assert prom[("astream_samples_total", (("rank", "1"), ("worker", "main")))] == 50
