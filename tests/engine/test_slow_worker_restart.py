"""Persistent DataLoader workers, one of them slow to start, and a trainer that leaves an
iteration after its first batch and then resumes from its state (or starts the next epoch): the
slow worker starts the iteration that was left only after the next one began. It must not take
that next iteration's position, nor a packed resume's cursors, for the iteration being left
(dataset._Epochs.set_iteration). Found by a fresh-clone CI run under load
(tests/packing/test_dataset.py::test_loader_resume_exact[2-True] failed once); a worker_init_fn
that sleeps in worker 1 makes the interleaving certain."""

from __future__ import annotations

import functools
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from torch.utils.data import DataLoader

from astream import MDSWriter, StreamingDataLoader, StreamingDataset

N = 120


HOLD_S = 3.0  # worker 1's start is held this long (its worker_init_fn)


def _slow_second(worker: int, ready: str | None = None) -> None:
    if worker == 1:
        time.sleep(HOLD_S)
        if ready is not None:  # when worker 1 could start (CLOCK_MONOTONIC: one clock for all)
            with open(ready, "w") as f:
                f.write(repr(time.monotonic()))


@pytest.fixture(scope="module")
def path(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = str(tmp_path_factory.mktemp("slowworker") / "ds")
    with MDSWriter(out=out, columns={"id": "int", "x": "ndarray:int32"}, size_limit=800) as w:
        for i in range(N):
            w.write({"id": i, "x": np.arange(i % 7 + 1, dtype=np.int32) + i})
    return out


def _ids(batches: list[Any]) -> list[int]:
    return [int(i) for b in batches for i in b["id"]]


def _take(loader: Any, n: int | None = None) -> list[Any]:
    out = []
    for b in loader:
        out.append({"id": [int(i) for i in b["id"]]})
        if n is not None and len(out) == n:
            break
    return out


def _make(path: str) -> StreamingDataset:
    return StreamingDataset(local=path, batch_size=4, shuffle=True, shuffle_seed=11)


def _collate(samples: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": [s["id"] for s in samples]}


@pytest.mark.parametrize("context", [None, "spawn"])
def test_resume_after_leaving_early(path: str, context: str | None, tmp_path: Any) -> None:
    kw: dict[str, Any] = {"batch_size": 4, "num_workers": 2, "persistent_workers": True,
                          "collate_fn": _collate, "multiprocessing_context": context}  # fmt: skip
    full = _ids(_take(StreamingDataLoader(_make(path), **kw)))
    assert sorted(full) == list(range(N))
    ready = os.path.join(tmp_path, "worker1-ready")
    loader = StreamingDataLoader(
        _make(path), worker_init_fn=functools.partial(_slow_second, ready=ready), **kw
    )
    head = _ids(_take(loader, 1))
    got_head = time.monotonic()
    # the fault this test is about: worker 1 had not started its first iteration yet when
    # worker 0's first batch came (timed against worker 1's own clock reading, so a slow
    # spawn of both workers under load does not void the check)
    assert not os.path.exists(ready) or float(Path(ready).read_text()) > got_head, (
        "worker 0's first batch came after worker 1's start"
    )
    loader.load_state_dict(loader.state_dict())
    rest = _ids(_take(loader))
    assert head + rest == full
    # and the next epoch is a whole epoch, in the order a fresh loader gives it
    nxt = _ids(_take(loader))
    assert sorted(nxt) == list(range(N)) and nxt != full


def test_packed_resume_after_leaving_early(path: str) -> None:
    def make() -> StreamingDataset:
        return StreamingDataset(local=path, batch_size=4, shuffle=True, shuffle_seed=11,
                                pack_to=16, pack_column="x")  # fmt: skip

    kw: dict[str, Any] = {"batch_size": 3, "num_workers": 2, "persistent_workers": True}
    full = [b["x"].numpy().copy() for b in StreamingDataLoader(make(), **kw)]
    loader = StreamingDataLoader(make(), worker_init_fn=_slow_second, **kw)
    head = []
    for b in loader:
        head.append(b["x"].numpy().copy())
        break
    loader.load_state_dict(loader.state_dict())
    rest = [b["x"].numpy().copy() for b in loader]
    got = head + rest
    assert len(got) == len(full) and all(np.array_equal(a, b) for a, b in zip(got, full))


def test_plain_dataloader_after_a_streaming_one(path: str) -> None:
    """The token a StreamingDataLoader gives its workers is not a plain DataLoader's: the
    latter's iterations (each one a first, for its new workers) all run in full."""
    ds = _make(path)
    sl = StreamingDataLoader(ds, batch_size=4, num_workers=2, persistent_workers=True,
                             collate_fn=_collate)  # fmt: skip
    for _ in range(3):
        assert sorted(_ids(_take(sl))) == list(range(N))
    del sl
    plain = DataLoader(ds, batch_size=4, num_workers=2, collate_fn=_collate)
    for epoch in (3, 4):
        ds.set_epoch(epoch)
        assert sorted(_ids(_take(plain))) == list(range(N))
