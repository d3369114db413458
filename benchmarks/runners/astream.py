"""astream runner (the project's own venv). A thin adapter: each method imports the public API
it needs and reports "not built yet" (n/a, never a made-up figure) while that API is missing.

Endpoint for cold scenarios: the S3 endpoint environment (``S3_ENDPOINT_URL`` /
``AWS_ENDPOINT_URL``) set by run.py, read by astream's S3 backend.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from benchmarks.collate import collate
from benchmarks.runners.common import Adapter, NotBuilt, main
from benchmarks.workloads import WORKLOADS, Source, mds_columns


def _api(module: str, name: str) -> Any:
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise NotBuilt(f"{module}.{name}") from e


class Astream(Adapter):
    name = "astream"

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
        if cold:
            return ds_cls(remote=spec["remote"], local=spec["cache"], **common)
        return ds_cls(local=spec["data"], **common)

    def loader(self, spec: dict[str, Any], ds: Any, num_workers: int) -> Any:
        loader_cls = _api("astream.torch.dataloader", "StreamingDataLoader")
        return loader_cls(
            ds, batch_size=spec["batch_size"], num_workers=num_workers, collate_fn=collate
        )


if __name__ == "__main__":
    main(Astream)
