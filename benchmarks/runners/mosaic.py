"""mosaicml-streaming 0.13.0 runner (peers' venv). Endpoint: ``S3_ENDPOINT_URL`` (set by run.py)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from benchmarks.collate import collate
from benchmarks.runners.common import Adapter, main, write_synthetic_index
from benchmarks.workloads import WORKLOADS, Source, mds_columns


class Mosaic(Adapter):
    name = "mosaic"

    def __init__(self) -> None:
        import streaming  # type: ignore[import-not-found]  # the peers venv only
        from streaming.base.util import clean_stale_shared_memory  # type: ignore[import-not-found]

        clean_stale_shared_memory()
        self.st = streaming

    def write(self, spec: dict[str, Any], source: Source, out: Path) -> None:
        wl = WORKLOADS[spec["workload"]]
        with self.st.MDSWriter(
            out=str(out),
            columns=mds_columns(wl),
            compression=wl.compression,
            size_limit=spec["shard_bytes"],
        ) as w:
            for i in range(len(source)):
                w.write(source[i])

    def dataset(self, spec: dict[str, Any], cold: bool) -> Any:
        common = {"shuffle": True, "shuffle_seed": spec["seed"], "batch_size": spec["batch_size"]}
        if cold:
            return self.st.StreamingDataset(remote=spec["remote"], local=spec["cache"], **common)
        return self.st.StreamingDataset(local=spec["data"], **common)

    def loader(self, spec: dict[str, Any], ds: Any, num_workers: int) -> Any:
        return self.st.StreamingDataLoader(
            ds, batch_size=spec["batch_size"], num_workers=num_workers, collate_fn=collate
        )

    def scale(self, spec: dict[str, Any]) -> dict[str, float]:
        from streaming.base.batching import generate_work  # type: ignore[import-not-found]
        from streaming.base.world import World  # type: ignore[import-not-found]

        root = write_synthetic_index(spec)
        t0 = time.perf_counter()
        ds = self.st.StreamingDataset(
            local=str(root), shuffle=True, shuffle_seed=spec["seed"], batch_size=32
        )
        t_index = time.perf_counter() - t0
        total = ds.num_samples
        world = World.detect()
        state = {
            "epoch": 0,
            "sample_in_epoch": total // 2,
            "num_canonical_nodes": 64,
            "shuffle_seed": spec["seed"],
            "initial_physical_nodes": 1,
        }
        # the real resume path: state into shared memory, read back, then the epoch's partition
        t1 = time.perf_counter()
        ds.load_state_dict(state)
        epoch, offset = ds._resume(world, 0)
        work = generate_work(ds.batching_method, ds, world, epoch, offset)
        t_resume = time.perf_counter() - t1
        return {
            "index_load_s": t_index,
            "resume_s": t_resume,
            "epoch_samples": total,
            "work_samples": int(work.size),
        }


if __name__ == "__main__":
    main(Mosaic)
