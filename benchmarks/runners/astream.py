"""astream runner (the project's own venv). A thin adapter: each method imports the public API
it needs and reports "not built yet" (n/a, never a made-up figure) while that API is missing.

Endpoint for cold scenarios: the S3 endpoint environment (``S3_ENDPOINT_URL`` /
``AWS_ENDPOINT_URL``) set by run.py, read by astream's S3 backend.
"""

from __future__ import annotations

import importlib
import time
from pathlib import Path
from typing import Any

from benchmarks.collate import collate
from benchmarks.runners.common import Adapter, NotBuilt, main, write_synthetic_index
from benchmarks.workloads import WORKLOADS, Source, mds_columns

# the order of the "astream" column when a spec names none: astream's own block order, named
# (the dataset's default is the reference's py1e); results.json's meta records it
ORDER = "astream"


def _api(module: str, name: str) -> Any:
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise NotBuilt(f"{module}.{name}") from e


def _as_collated(loader: Any) -> Any:
    """Column batches under the names the shared collate gives (``offsets`` in bytes)."""
    for b in loader:
        pay = b["payload"]
        yield {
            "id": b["id"],
            "label": b["label"],
            "payload": pay,
            "offsets": b["payload_offsets"] * pay.element_size(),
        }


class Astream(Adapter):
    name = "astream"

    def __init__(self) -> None:
        # imported here, as the peers' runners import their library in __init__: the import is
        # timed apart (``import_s``), never inside construction or time to first batch
        for module in ("astream.torch.dataset", "astream.torch.dataloader"):
            try:
                importlib.import_module(module)
            except ImportError:
                pass  # reported as n/a by the scenario that needs it

    def write(self, spec: dict[str, Any], source: Source, out: Path) -> None:
        writer_cls = _api("astream.writer.mds", "MDSWriter")
        wl = WORKLOADS[spec["workload"]]
        with writer_cls(
            out=str(out),
            columns=mds_columns(wl),
            compression=wl.compression,
            size_limit=spec["shard_bytes"],
            exist_ok=True,
        ) as w:
            for i in range(len(source)):
                w.write(source[i])

    def dataset(self, spec: dict[str, Any], cold: bool) -> Any:
        ds_cls = _api("astream.torch.dataset", "StreamingDataset")
        common = {"shuffle": True, "shuffle_seed": spec["seed"], "batch_size": spec["batch_size"]}
        # named, never the default: the "astream" column is astream's own block order (its
        # figures compare across runs), "astream-py1e" the reference's algorithm and block
        common["shuffle_algo"] = spec.get("shuffle_algo") or ORDER
        if cold:
            return ds_cls(remote=spec["remote"], local=spec["cache"], **common)
        return ds_cls(local=spec["data"], **common)

    def loader(self, spec: dict[str, Any], ds: Any, num_workers: int) -> Any:
        loader_cls = _api("astream.torch.dataloader", "StreamingDataLoader")
        if spec.get("batch_format"):  # column batches (benchmarks/bench_batches.py)
            ld = loader_cls(
                ds,
                batch_size=spec["batch_size"],
                num_workers=num_workers,
                batch_format=spec["batch_format"],
                ragged="offsets",
            )
            return _as_collated(ld)
        return loader_cls(
            ds, batch_size=spec["batch_size"], num_workers=num_workers, collate_fn=collate
        )

    def scale(self, spec: dict[str, Any]) -> dict[str, float]:
        ds_cls = _api("astream.torch.dataset", "StreamingDataset")
        detect = _api("astream.runtime.placement", "detect")
        root = write_synthetic_index(spec)
        t0 = time.perf_counter()
        kw = {"shuffle": True, "shuffle_seed": spec["seed"], "batch_size": 32}
        kw["shuffle_algo"] = spec.get("shuffle_algo") or ORDER
        ds = ds_cls(local=str(root), **kw)
        total = len(ds)
        t_index = time.perf_counter() - t0
        state = ds.state_dict(total // 2, from_beginning=True)
        # resume: a fresh dataset on the same index, the state loaded, then the first batch's
        # sample ids of rank 0 / worker 0 (no data is read: the order only)
        ds2 = ds_cls(local=str(root), **kw)
        t1 = time.perf_counter()
        ds2.load_state_dict(state)
        place = detect()
        plan = ds2.plan(state["epoch"])
        first = next(iter(plan.worker_batches(place.world, 0, 0, state["sample_in_epoch"])))
        t_resume = time.perf_counter() - t1
        return {
            "index_load_s": t_index,
            "resume_s": t_resume,
            "epoch_samples": total,
            "first_batch": len(first),
        }


if __name__ == "__main__":
    main(Astream)
