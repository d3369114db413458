"""Hot-epoch throughput of sample dicts vs column batches (w=0), tokens and images.

Run: python -m benchmarks.bench_batches OUT.json  (prints medians; writes raw reps)."""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time

import numpy as np

from astream import MDSWriter, StreamingDataset


def write(path: str, kind: str, n: int) -> None:
    rng = np.random.default_rng(0)
    cols = (
        {"ids": "ndarray:uint16", "label": "int"}
        if kind == "tokens"
        else {"img": "bytes", "label": "int"}
    )
    with MDSWriter(out=path, columns=cols, size_limit=1 << 24) as w:
        for i in range(n):
            if kind == "tokens":
                w.write({"ids": rng.integers(0, 60000, 1250).astype(np.uint16), "label": i})
            else:
                w.write({"img": rng.bytes(100_000), "label": i})


def main() -> None:
    out: dict[str, list[float]] = {}
    for kind, n in (("tokens", 20_000), ("images", 2_000)):
        path = tempfile.mkdtemp() + "/" + kind
        write(path, kind, n)
        ds = StreamingDataset(local=path, batch_size=32, shuffle=True)
        for _rep in range(3):
            for mode in ("dicts", "batches"):
                ds.set_epoch(0)
                t = time.perf_counter()
                if mode == "dicts":
                    k = sum(1 for _ in ds)
                else:
                    k = sum(len(b["label"]) for b in ds.batches(ragged="offsets"))
                assert k == n
                out.setdefault(f"{kind}/{mode}", []).append(n / (time.perf_counter() - t))
    for key, v in out.items():
        print(f"{key}: median {statistics.median(v):,.0f} samples/s over {len(v)} reps")
    with open(sys.argv[1], "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
