"""An Engine's per-process parts (stats, cache space, fetcher, opener) are made once per process,
whichever threads ask first: a metrics publisher thread asking while an iteration starts got a
second set that replaced the first, and the iteration then counted its samples where no snapshot
looked (``astream bench``'s metrics read 0 samples once in a fresh-clone CI run)."""

from __future__ import annotations

import threading
from typing import Any

from astream import MDSWriter, StreamingDataset
from astream.metrics import Metrics


def _dataset(tmp_path: Any) -> StreamingDataset:
    out = str(tmp_path / "ds")
    with MDSWriter(out=out, columns={"id": "int"}, size_limit=400) as w:
        for i in range(500):
            w.write({"id": i})
    return StreamingDataset(local=out, batch_size=4)


def test_threads_asking_at_once_get_one_set(tmp_path: Any) -> None:
    ds = _dataset(tmp_path)
    engine = ds.engine
    for _ in range(20):
        engine._local = None  # as in a process that has not used the dataset yet
        start = threading.Barrier(8)
        got: list[Any] = []

        def ask(start: threading.Barrier, got: list[Any]) -> None:
            start.wait()
            got.append(engine._parts())

        threads = [threading.Thread(target=ask, args=(start, got)) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len({id(p) for p in got}) == 1
        assert engine._parts() is got[0]


def test_metrics_count_an_iteration_that_started_beside_its_publisher(tmp_path: Any) -> None:
    ds = _dataset(tmp_path)
    with Metrics(ds, interval=0.001) as m:  # its publisher reads the parts every millisecond
        n = sum(1 for _ in ds)
        snap = m.snapshot()
    assert n == 500 and snap["samples"] == 500
