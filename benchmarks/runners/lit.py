"""litdata 0.2.76 runner (peers' venv).

S3 endpoint through litdata's documented ``storage_options`` (passed to its boto3 client, from
which its obstore fetcher copies endpoint and region); obstore refuses plain-http endpoints
unless ``_OBSTORE_CLIENT_OPTIONS["allow_http"]`` is set, which :class:`Lit` does.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from benchmarks.collate import collate
from benchmarks.runners.common import Adapter, main
from benchmarks.workloads import WORKLOADS, Source


class _Item:
    """Picklable ``fn`` for ``litdata.optimize``: sample ``i`` of the workload source."""

    def __init__(self, path: str, kind: str) -> None:
        self.path, self.kind = path, kind
        self._src: Source | None = None

    def __call__(self, i: int) -> dict[str, Any]:
        if self._src is None:
            self._src = Source(self.path, self.kind)
        return self._src[i]

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "kind": self.kind, "_src": None}


class Lit(Adapter):
    name = "lit"

    def __init__(self) -> None:
        import litdata  # type: ignore[import-not-found]  # the peers venv only
        import litdata.streaming.downloader as dl  # type: ignore[import-not-found]

        dl._OBSTORE_CLIENT_OPTIONS["allow_http"] = True
        self.ld = litdata

    def _storage(self) -> dict[str, Any]:
        return {
            "endpoint_url": os.environ["S3_ENDPOINT_URL"],
            "aws_access_key_id": os.environ["AWS_ACCESS_KEY_ID"],
            "aws_secret_access_key": os.environ["AWS_SECRET_ACCESS_KEY"],
            "region_name": os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
        }

    def write(self, spec: dict[str, Any], source: Source, out: Path) -> None:
        wl = WORKLOADS[spec["workload"]]
        comp = wl.compression.split(":")[0] if wl.compression else None
        self.ld.optimize(
            fn=_Item(spec["source"], spec["payload_kind"]),
            inputs=list(range(len(source))),
            output_dir=str(out.resolve()),
            chunk_bytes=spec["shard_bytes"],
            compression=comp,
            num_workers=1,
            mode="overwrite",
            verbose=False,
        )

    def dataset(self, spec: dict[str, Any], cold: bool) -> Any:
        common: dict[str, Any] = {"shuffle": True, "seed": spec["seed"]}
        for k in ("item_shuffle_window", "batch_decode"):  # variant lit-full (benchmarks/run.py)
            if k in spec:
                common[k] = spec[k]
        if cold:
            ds = self.ld.StreamingDataset(
                spec["remote"], cache_dir=spec["cache"], storage_options=self._storage(), **common
            )
        else:
            ds = self.ld.StreamingDataset(str(Path(spec["data"]).resolve()), **common)
        want = spec.get("item_shuffle_window")
        if want is not None and ds._item_shuffle_window != want:  # litdata resolved it otherwise
            raise RuntimeError(f"item_shuffle_window={want} resolved to {ds._item_shuffle_window}")
        return ds

    def loader(self, spec: dict[str, Any], ds: Any, num_workers: int) -> Any:
        return self.ld.StreamingDataLoader(
            ds, batch_size=spec["batch_size"], num_workers=num_workers, collate_fn=collate
        )

    def scale(self, spec: dict[str, Any]) -> dict[str, float]:
        root = Path(spec["out"])
        root.mkdir(parents=True, exist_ok=True)
        n_shards, per_shard = spec["shards"], spec["per_shard"]
        template = json.loads((Path(spec["template"]) / "index.json").read_text())
        chunk = template["chunks"][0]
        chunks = [
            {**chunk, "chunk_size": per_shard, "filename": f"chunk-0-{i}.bin"}
            for i in range(n_shards)
        ]
        config = template["config"]
        (root / "index.json").write_text(json.dumps({"chunks": chunks, "config": config}))
        t0 = time.perf_counter()
        ds = self.ld.StreamingDataset(str(root), shuffle=True, seed=spec["seed"])
        total = len(ds)
        t_index = time.perf_counter() - t0
        return {"index_load_s": t_index, "epoch_samples": total}


if __name__ == "__main__":
    main(Lit)
