"""Where a hot epoch's time goes: cProfile with the CPU clock (so the time other processes
take from a loaded machine is not charged to whatever function was running), one process.

    python -m benchmarks.prof_hot DATA_DIR --out OUT_DIR

``DATA_DIR`` holds the harness's astream datasets (``images``, ``tokens``). Profiles:

- ``images_w0_torch``: the steady part (after the first batch) of a hot epoch of
  ``ds.batches(batch_format="torch", ragged="offsets")``, no DataLoader;
- ``tokens_w2_dicts_<handover>``: the main process of ``StreamingDataLoader(num_workers=2)``
  with the harness's collate over sample dicts, for ``handover="ring"`` (the default) and
  ``"torch"`` (torch's pickling): what the trainer's process spends per batch.

Each profile is written as text (top 30 functions by own CPU time) plus a line with the
epoch's wall and CPU seconds.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _stats(pr: cProfile.Profile, head: str) -> str:
    buf = io.StringIO()
    pstats.Stats(pr, stream=buf).sort_stats("tottime").print_stats(30)
    return head + "\n" + buf.getvalue()


def images_w0(data: Path) -> str:
    from astream import StreamingDataset

    def epoch() -> Any:
        ds = StreamingDataset(local=str(data), shuffle=True, shuffle_seed=1234, batch_size=32)
        return ds.batches(ragged="offsets", batch_format="torch")

    for _ in epoch():  # warm: imports, page cache
        pass
    it = epoch()
    next(it)
    pr = cProfile.Profile(time.process_time)
    t, c = time.perf_counter(), time.process_time()
    pr.enable()
    n = sum(len(b["label"]) for b in it)
    pr.disable()
    head = (
        f"images w0 batches: {n} samples after the first batch, "
        f"wall {time.perf_counter() - t:.3f} s, CPU {time.process_time() - c:.3f} s"
    )
    return _stats(pr, head)


def tokens_w2(data: Path, handover: str) -> str:
    from astream import StreamingDataLoader, StreamingDataset
    from benchmarks.collate import collate

    ds = StreamingDataset(local=str(data), shuffle=True, shuffle_seed=1234, batch_size=32)
    ld = StreamingDataLoader(
        ds, batch_size=32, num_workers=2, collate_fn=collate, handover=handover
    )
    it = iter(ld)
    n = len(next(it)["id"])
    pr = cProfile.Profile(time.process_time)
    t, c = time.perf_counter(), time.process_time()
    pr.enable()
    for b in it:
        n += len(b["id"])
    pr.disable()
    head = (
        f"tokens w2 dicts handover={handover}: {n} samples, wall {time.perf_counter() - t:.3f} s, "
        f"main-process CPU {time.process_time() - c:.3f} s"
    )
    return _stats(pr, head)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.prof_hot")
    ap.add_argument("data", type=Path, help="directory holding the images and tokens datasets")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    jobs: dict[str, Callable[[], str]] = {
        "images_w0_torch": lambda: images_w0(a.data / "images"),
        "tokens_w2_dicts_ring": lambda: tokens_w2(a.data / "tokens", "ring"),
        "tokens_w2_dicts_torch": lambda: tokens_w2(a.data / "tokens", "torch"),
    }
    for name, job in jobs.items():
        text = job()
        (a.out / f"prof_{name}.txt").write_text(text)
        print(text.splitlines()[0])


if __name__ == "__main__":
    main()
