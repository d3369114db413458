"""The planner's figures for the eviction runs of docs/results/plan.md "Measured", one JSON row
each.

``python tests/plan/pins_plan.py OUT.jsonl``: writes bench_evict's dataset (3,000 samples,
shards of <= 5,000 B, seed 9176) and the lockstep test's (tests/engine/test_eviction.py) into a
temporary directory, plans them as those runs run (2 ranks, 1, 2 and 4 workers, the same
orders and cache limits) and appends the planned downloads, bytes, their range over 32
seeded interleavings of the consumers (``interleavings=32``: min, median, max), waits for pins
and high-water. No data is read remotely: this is the plan side of the comparison only.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from astream.plan import simulate  # noqa: E402
from benchmarks.bench_evict import write_dataset  # noqa: E402
from tests.engine.conftest import write_dataset as write_lockstep  # noqa: E402


def _shard_bytes(src: str) -> tuple[int, int]:
    sizes = [os.path.getsize(os.path.join(src, n)) for n in os.listdir(src) if "shard" in n]
    return sum(sizes), max(sizes)


def main(out: str) -> None:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        bench = os.path.join(tmp, "bench")
        write_dataset(Path(bench), 3000, 5000, 9176)
        total, _ = _shard_bytes(bench)
        for workers in (1, 2, 4):
            for name, limit in (("tight", 15000), ("six", 30000)):
                got = simulate(bench, batch_size=8, ranks_per_node=2, workers=workers,
                               cache_limit=limit, cache_policy=("next_use", "lru"),
                               shuffles=["py1e"], shuffle_block_size=200,
                               num_canonical_nodes=1, shuffle_seed=9176,
                               interleavings=32)  # fmt: skip
                for r in got:
                    rows.append({
                        "case": f"bench_evict:{name}", "workers": workers, "cache_limit": limit,
                        "policy": r.policy, "downloads": r.total("downloads"),
                        "bytes": r.total("bytes"), "bytes_range": r.span("bytes"),
                        "downloads_range": r.span("downloads"),
                        "bytes_per_dataset": round(r.total("bytes") / total, 3),
                        "waits": r.total("waits"), "high_water": r.total("high_water"),
                        "overcommit": max(f.overcommit for f in r.epochs),
                    })  # fmt: skip
        lock = os.path.join(tmp, "lockstep")
        write_lockstep(lock, 3000, size_limit=5_000)
        total, biggest = _shard_bytes(lock)
        for shards in (6, 21):
            got = simulate(lock, batch_size=8, ranks_per_node=2, workers=2, epochs=2,
                           cache_limit=shards * biggest, cache_policy=("next_use", "lru"),
                           shuffles=["astream"], shuffle_block_size=200,
                           interleavings=32)  # fmt: skip
            for r in got:
                rows.append({
                    "case": f"test_eviction:{shards}", "workers": 2,
                    "cache_limit": shards * biggest, "policy": r.policy,
                    "bytes": [r.total("bytes", e) for e in (0, 1)],
                    "bytes_range": [r.span("bytes", e) for e in (0, 1)],
                    "downloads_range": [r.span("downloads", e) for e in (0, 1)],
                    "downloads": [r.total("downloads", e) for e in (0, 1)],
                    "high_water": [r.total("high_water", e) for e in (0, 1)],
                    "waits": [r.total("waits", e) for e in (0, 1)], "dataset_bytes": total,
                })  # fmt: skip
    with open(out, "a") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
            print(json.dumps(row))


if __name__ == "__main__":
    main(sys.argv[1])
