"""``astream demo`` end to end, and the metrics API (worker aggregation, periodic logging)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading

import pytest

from astream import StreamingDataLoader, StreamingDataset
from astream.errors import ConfigError
from astream.metrics import COUNTERS, Metrics, process_snapshot
from tests.cli.test_inspect_verify import _write

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_demo_s3_subprocess():
    # README command 1's main job, small: the S3 emulator, 2 workers, a training step a batch.
    p = subprocess.run(
        [sys.executable, "-m", "astream", "demo", "--samples", "3000", "--no-progress"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    lines = {line.split()[0]: line for line in p.stdout.splitlines() if line.strip()}
    assert lines["dataset"].startswith("dataset        3000 samples, ")
    assert lines["dataset"].endswith(" at s3://astream-demo/tokens")
    assert lines["epoch"] == (
        "epoch          every sample exactly once: yes (+0 padding samples to fill the last batch)"
    )
    assert "(3 processes)" in lines["cache"] and "3000 samples" in lines["cache"]
    assert "samples/s" in lines["throughput"]
    first, last = lines["training"].split("loss ")[1].split(" over")[0].split(" -> ")
    assert float(last) < float(first)


def test_demo_local_in_process(cli, tmp_path):
    r = cli(
        "demo",
        "--store",
        "local",
        "--samples",
        "500",
        "--num-workers",
        "0",
        "--batch-size",
        "50",
        "--workdir",
        str(tmp_path),
        "--no-progress",
    )
    assert r.code == 0, r.err
    assert "every sample exactly once: yes (+0 padding" in r.out
    assert os.path.isfile(tmp_path / "tokens" / "index.json")  # --workdir is kept
    assert cli("demo", "--samples", "0").err == "astream: error: --samples must be >= 1, got 0\n"


@pytest.fixture
def dataset(tmp_path):
    path = str(tmp_path / "d")
    _write(path, n=300)
    return path


def _collate(batch):
    return [s["label"] for s in batch]


def test_metrics_aggregate_workers(dataset):
    ds = StreamingDataset(local=dataset, batch_size=10)
    with Metrics(ds, interval=0.2) as m:
        loader = StreamingDataLoader(
            ds, batch_size=10, num_workers=2, collate_fn=_collate, worker_init_fn=m.worker_init_fn
        )
        labels = [x for b in loader for x in b]
        assert sorted(labels) == list(range(300))
        snap = m.snapshot()
        assert snap["processes"] == 3 and len(m.workers()) == 2
        assert snap["samples"] == 300  # the main process read nothing itself
        assert process_snapshot(ds)["samples"] == 0
        assert set(snap) == {*COUNTERS, "processes"}
        # a second epoch starts new workers; the totals keep the first epoch's
        assert len([x for b in loader for x in b]) == 300
        assert m.snapshot()["samples"] == 600 and len(m.workers()) == 4
    assert not os.path.exists(m.directory)


def test_metrics_chained_worker_init_fn_and_no_workers(dataset, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    ds = StreamingDataset(local=dataset, batch_size=10)
    m = Metrics(ds)
    fn = m.wrap_worker_init_fn(_Mark(str(marks)))
    loader = StreamingDataLoader(
        ds, batch_size=10, num_workers=2, collate_fn=_collate, worker_init_fn=fn
    )
    assert len([x for b in loader for x in b]) == 300
    assert sorted(os.listdir(marks)) == ["0", "1"]
    list(ds)  # num_workers=0: the main process's own counters
    assert m.snapshot()["samples"] == 600
    m.close()


class _Mark:
    def __init__(self, d: str) -> None:
        self.d = d

    def __call__(self, worker_id: int) -> None:
        open(os.path.join(self.d, str(worker_id)), "w").close()


def test_metrics_periodic_log(dataset):
    ds = StreamingDataset(local=dataset, batch_size=10)
    list(ds)
    got = threading.Event()
    records: list[str] = []

    class Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())
            got.set()

    log = logging.getLogger("test.astream.metrics")
    log.addHandler(Catch())
    log.setLevel(logging.INFO)
    with Metrics(ds) as m:
        m.start_logging(0.05, logger=log)
        assert got.wait(10)
    assert records[0].startswith("astream: 300 samples, 0.0 MB fetched in 0 shards / 0 requests")
    assert records[0].endswith("(1 processes)")
    with pytest.raises(ConfigError, match=r"^interval must be > 0 seconds, got 0$"):
        Metrics(ds, interval=0)
