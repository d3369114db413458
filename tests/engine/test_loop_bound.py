"""How long astream holds the caller's event loop, measured per loop callback in CPU time.

A callback's thread CPU time (``time.thread_time`` around each ``Handle._run``) is what astream
itself spends on the loop before giving it back; unlike wall time it does not count the time
the process waits for a core on a busy machine.

The garbage collector runs inside whichever callback allocates past its threshold, and a full
collection scans every object of the process: in a fresh interpreter with numpy and asyncio
imported, ~32,000 objects and 15-35 ms, wherever it lands (a training process with torch has
several times as many). That pause is the process's, so it is taken out of the callback it
landed in and counted apart: the ten-million-sample tests hold astream to a few full
collections per epoch, which only holds if astream keeps almost nothing alive per batch it
yields (each object that outlives two young collections counts towards the next full one).
"""

from __future__ import annotations

import asyncio
import gc
import json
import random
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from astream import MDSWriter
from astream.aio import AsyncStreamingDataset

from .loopclock import cold_epoch, hot_epoch, longest

BOUND_S = 0.020  # docs/async.md: astream holds the loop at most 20 ms at a time


def _write(path: str, n: int, size_limit: str = "4mb") -> None:
    with MDSWriter(out=path, columns={"x": "int"}, size_limit=size_limit) as w:
        for i in range(n):
            w.write({"x": i})


def test_a_hot_epoch_of_200k_samples_holds_the_loop_at_most_20ms(tmp_path: Any) -> None:
    path = str(tmp_path / "ds")
    _write(path, 200_000)
    # a loaded machine slows even CPU time (shared caches): the bound must hold in one of three
    tries = [longest(hot_epoch(path), 200_000).own for _ in range(3)]
    assert min(tries) < BOUND_S, tries


# full collections a ten-million-sample epoch may start (measured: 3, open included; with a
# list kept per yielded batch of 64, 11)
FULL_MAX = 6

TEN_MILLION = """
import json, sys
sys.path.insert(0, sys.argv[2])
from tests.engine.loopclock import hot_epoch, longest
print(json.dumps(longest(hot_epoch(sys.argv[1]), 10_000_000).as_dict()))
"""


@pytest.mark.slow  # ~10 s to write, 20-40 s an epoch
def test_ten_million_samples_open_and_epoch_hold_the_loop_at_most_20ms(tmp_path: Any) -> None:
    """At ten million samples: planning epoch 0 (seconds of numpy) runs in a thread during
    ``open``; so do the lookahead's plan walk, opening each shard (its offsets checked) and
    unmapping them at the end; the shards' offsets are compact arrays.

    Measured in a fresh interpreter, as a training program runs: pytest's own ~50,000 objects
    would make the full collections many more and longer."""
    path = str(tmp_path / "ds")
    _write(path, 10_000_000)
    root = str(Path(__file__).resolve().parents[2])

    def once() -> dict[str, float]:
        run = subprocess.run(
            [sys.executable, "-c", TEN_MILLION, path, root],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert run.returncode == 0, run.stderr[-3000:]
        got: dict[str, float] = json.loads(run.stdout.splitlines()[-1])
        assert 1 <= got["full"] <= FULL_MAX, got  # one at least: the pause was measured
        return got

    _best_of_three(once)


def _best_of_three(once: Callable[[], dict[str, float]]) -> None:
    """The bound holds in one of up to three runs (a loaded machine slows even CPU time:
    shared caches)."""
    tries = [once()]
    while min(t["own"] for t in tries) >= BOUND_S and len(tries) < 3:
        tries.append(once())
    assert min(t["own"] for t in tries) < BOUND_S, tries


COLD = """
import json, sys
sys.path.insert(0, sys.argv[3])
from tests.engine.loopclock import cold_epoch, longest
print("s3 imported before open:", "astream.storage.s3" in sys.modules)
print(json.dumps(longest(cold_epoch(sys.argv[1], sys.argv[2]), 10_000_000).as_dict()))
"""


@pytest.mark.slow  # ~12 s to write, ~15 s an epoch
def test_a_cold_s3_epoch_of_ten_million_samples_holds_the_loop_at_most_20ms(
    s3_bucket: str, tmp_path: Any
) -> None:
    """Cold at ten million samples, in a fresh interpreter: ``open`` imports the S3 backend
    in a thread, and the lookahead plans past its window (the prefetcher's slots stay idle
    for long at a cold start) in a thread too: planning all it may at once on the loop held
    it ~210 ms."""
    url = f"{s3_bucket}/loop10m-{uuid.uuid4().hex[:8]}"
    _write(url, 10_000_000)  # 20 shards of 4 MB
    root = str(Path(__file__).resolve().parents[2])

    runs = iter(range(3))

    def once() -> dict[str, float]:
        k = next(runs)
        run = subprocess.run(
            [sys.executable, "-c", COLD, url, str(tmp_path / f"cache{k}"), root],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert run.returncode == 0, run.stderr[-3000:]
        assert "s3 imported before open: False" in run.stdout, run.stdout
        got: dict[str, float] = json.loads(run.stdout.splitlines()[-1])
        assert 1 <= got["full"] <= FULL_MAX, got
        return got

    _best_of_three(once)


def test_a_cold_s3_epoch_random_reads_and_checkpoints_hold_the_loop_at_most_20ms(
    s3_bucket: str, tmp_path: Any
) -> None:
    """Cold: every shard downloaded during the epoch (on astream's I/O thread), with
    ``aget_many`` of 2,000 random samples and checkpoints along the way."""
    url = f"{s3_bucket}/loop-{uuid.uuid4().hex[:8]}"
    _write(url, 200_000, size_limit="256kb")  # 11 shards, fetched during the epoch
    rng = random.Random(0)
    picks = [rng.randrange(200_000) for _ in range(2_000)]

    tries = [
        longest(cold_epoch(url, str(tmp_path / f"cache{k}"), picks, every=500), 202_000).own
        for k in range(2)
    ]
    assert min(tries) < BOUND_S, tries


def test_the_lookahead_keeps_few_objects_for_the_garbage_collector(tmp_path: Any) -> None:
    """Planned batches hold their positions as tuples and ranges (untracked by the collector
    once seen) in slotted groups: a window of thousands of batches adds about one tracked
    object per batch, not one list per group plus a dict per batch."""
    path = str(tmp_path / "ds")
    _write(path, 400_000)  # ~350k samples a shard: the lookahead window spans ~5,000 batches

    async def main() -> tuple[int, int]:
        gc.collect()
        before = len(gc.get_objects())
        ds = await AsyncStreamingDataset.open(local=path, batch_size=64, shuffle=True)
        got = 0
        async for batch in ds.aiter(batch_size=64):
            got += len(batch)
            if got == 64 * 3_000:  # the window has opened to its full size by now
                gc.collect()  # untracks the tuples of ints, as any collection does
                big = [len(o) for o in gc.get_objects() if type(o) in (list, tuple, dict)]
                assert max(big) < 100_000  # no shard's offsets in a list the GC scans each time
                return len(gc.get_objects()) - before, got
        return -1, got

    added, got = asyncio.run(main())
    assert got == 64 * 3_000
    # measured: ~5,200 (one BatchGroups per planned batch, a few hundred others); with lists
    # and a __dict__ per group the same window added ~46,000
    assert 0 < added < 10_000, added


def test_the_long_steps_of_open_and_aiter_run_off_the_loop(tmp_path: Any, monkeypatch: Any) -> None:
    """What costs milliseconds per shard or per planned batch runs in threads, whatever the
    machine: building the engine and its shared counters (``open``), walking the plan
    (``Lookahead.locate``), opening a cached shard (its offsets checked) and unmapping the
    shards at the epoch's end. Each is recorded with the thread it did its work in."""
    from astream.dataset.epochs import _Epochs
    from astream.runtime.engine import Engine
    from astream.runtime.prefetch import Lookahead
    from astream.runtime.reader import ShardOpener

    path = str(tmp_path / "ds")
    _write(path, 20_000, size_limit="16kb")
    shards = len(json.loads((tmp_path / "ds" / "index.json").read_text())["shards"])
    where: dict[str, list[int]] = {}

    def record(cls: Any, name: str, works: Callable[[Any], bool]) -> None:
        inner = getattr(cls, name)

        def wrapped(self: Any, *a: Any, **kw: Any) -> Any:
            if works(self):
                where.setdefault(name, []).append(threading.get_ident())
            return inner(self, *a, **kw)

        monkeypatch.setattr(cls, name, wrapped)

    record(Engine, "__init__", lambda self: True)
    record(_Epochs, "__init__", lambda self: True)
    record(Engine, "_make_parts", lambda self: self._local is None)
    record(Lookahead, "locate", lambda self: not self._located and not self._done)
    record(ShardOpener, "try_open", lambda self: True)
    record(ShardOpener, "release_all", lambda self: bool(self._open))

    async def main() -> tuple[int, int]:
        ds = await AsyncStreamingDataset.open(local=path, batch_size=500, shuffle=True)
        got = 0
        async for batch in ds.aiter(batch_size=64):
            got += len(batch)
        return threading.get_ident(), got

    loop_thread, got = asyncio.run(main())
    assert got == 20_000
    assert sorted(where) == ["__init__", "_make_parts", "locate", "release_all", "try_open"], where
    assert shards >= 10 and len(where["try_open"]) >= shards, (shards, where)
    assert len(where["__init__"]) == 2, where
    for name, threads in where.items():
        assert loop_thread not in threads, name
