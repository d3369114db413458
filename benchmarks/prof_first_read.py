"""Where astream's first random read of a local shard goes, against a later read of it.

    python benchmarks/prof_first_read.py /tmp/random-data/images

(the data of ``bench_random.py``). In a fresh process: read sample 0 (the process's parts and
the decoder are built), then one sample of each other shard (its first read here), then
another of each (a later read). Prints the medians over shards of each read, and of the
opener's methods, each timed by a wrapper (about 1 us per call added). Results:
``benchmarks/results/random-local/first-read-profile.txt``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from astream import StreamingDataset


def main(path: str) -> None:
    ds = StreamingDataset(local=path, batch_size=1)
    starts = [int(x) for x in ds.engine.catalog.starts]
    shards = len(starts) - 1 if starts[-1] == len(ds) else len(starts)
    ds[0]
    spent: dict[str, list[float]] = {}
    opener = ds.engine._parts().random

    def timed(name: str) -> None:
        f: Callable[..., Any] = getattr(opener, name)

        def g(*a: Any, **k: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                spent.setdefault(name, []).append(time.perf_counter() - t0)

        setattr(opener, name, g)

    for name in ("_unmappable", "_head", "_check_version", "decoder", "read_unmapped"):
        timed(name)
    for label, at in (("first", 7), ("later", 9)):
        spent.clear()
        reads = []
        for s in range(1, shards):
            t0 = time.perf_counter()
            ds[starts[s] + at]
            reads.append(time.perf_counter() - t0)
        parts = {k: round(float(np.median(v)) * 1e6, 1) for k, v in spent.items()}
        print(label, round(float(np.median(reads)) * 1e6, 1), parts)


if __name__ == "__main__":
    main(sys.argv[1])
