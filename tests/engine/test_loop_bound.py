"""How long astream holds the caller's event loop, measured per loop callback in CPU time.

A callback's thread CPU time (``time.thread_time`` around each ``Handle._run``) is what astream
itself spends on the loop before giving it back; unlike wall time it does not count the time
the process waits for a core on a busy machine. The garbage collector runs inside whichever
callback allocates, so its pauses count too: the second test holds astream to few tracked
objects per planned batch, which is what makes a full collection cheap at any dataset size.
"""

from __future__ import annotations

import asyncio
import gc
import random
import subprocess
import sys
import uuid
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
    tries = [longest(hot_epoch(path), 200_000) for _ in range(3)]
    assert min(tries) < BOUND_S, tries


TEN_MILLION = """
import sys
sys.path.insert(0, sys.argv[2])
from tests.engine.loopclock import hot_epoch, longest
print(longest(hot_epoch(sys.argv[1]), 10_000_000))
"""


@pytest.mark.slow  # ~10 s to write, 20-40 s an epoch
def test_ten_million_samples_open_and_epoch_hold_the_loop_at_most_20ms(tmp_path: Any) -> None:
    """At ten million samples: planning epoch 0 (seconds of numpy) runs in a thread during
    ``open``; the ids of planned batches are computed a few thousand at a time; the shards'
    offsets are compact arrays, freed at once when the epoch ends.

    Measured in a fresh interpreter, as a training program runs: a full garbage collection
    scans every object of the process, and pytest's own ~50,000 objects (not astream's) would
    double its pause here."""
    path = str(tmp_path / "ds")
    _write(path, 10_000_000)
    root = str(Path(__file__).resolve().parents[2])

    def once() -> float:
        run = subprocess.run(
            [sys.executable, "-c", TEN_MILLION, path, root],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert run.returncode == 0, run.stderr[-3000:]
        return float(run.stdout.split()[-1])

    tries = [once()]
    while min(tries) >= BOUND_S and len(tries) < 3:  # a loaded machine: the bound holds once
        tries.append(once())
    assert min(tries) < BOUND_S, tries


COLD = """
import sys
sys.path.insert(0, sys.argv[3])
from tests.engine.loopclock import cold_epoch, longest
print("s3 imported before open:", "astream.storage.s3" in sys.modules)
print(longest(cold_epoch(sys.argv[1], sys.argv[2]), 10_000_000))
"""


@pytest.mark.slow  # ~12 s to write, ~15 s an epoch
def test_a_cold_s3_epoch_of_ten_million_samples_holds_the_loop_at_most_20ms(
    s3_bucket: str, tmp_path: Any
) -> None:
    """Cold at ten million samples, in a fresh interpreter: ``open`` imports the S3 backend
    in a thread, and the lookahead plans past its window a step per batch (the prefetcher's
    slots stay idle for long at a cold start: planning all it may at once held the loop
    ~210 ms)."""
    url = f"{s3_bucket}/loop10m-{uuid.uuid4().hex[:8]}"
    _write(url, 10_000_000)  # 20 shards of 4 MB
    root = str(Path(__file__).resolve().parents[2])

    def once(k: int) -> float:
        run = subprocess.run(
            [sys.executable, "-c", COLD, url, str(tmp_path / f"cache{k}"), root],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert run.returncode == 0, run.stderr[-3000:]
        assert "s3 imported before open: False" in run.stdout, run.stdout
        return float(run.stdout.split()[-1])

    tries = [once(0)]
    while min(tries) >= BOUND_S and len(tries) < 3:  # a loaded machine: the bound holds once
        tries.append(once(len(tries)))
    assert min(tries) < BOUND_S, tries


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
        longest(cold_epoch(url, str(tmp_path / f"cache{k}"), picks, every=500), 202_000)
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
