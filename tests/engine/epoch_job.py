"""A training-like job run as a subprocess by the multi-process tests.

Iterates one epoch through a StreamingDataLoader and writes the labels of every batch, one JSON
list per line, to ``--out`` (flushed per batch, so a killed job leaves what it consumed).
Reads RANK/WORLD_SIZE/LOCAL_WORLD_SIZE like any torchrun job; if torch.distributed is
initialised by torchrun (``--dist``), it also all-gathers a checksum to prove the ranks ran
together.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from astream import StreamingDataLoader, StreamingDataset


def collate(batch: list[dict[str, Any]]) -> list[int]:
    return [int(s["label"]) for s in batch]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--remote")
    p.add_argument("--cache-dir", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--cache-limit", default=None)
    p.add_argument("--shuffle", action="store_true")
    p.add_argument("--endpoint", default=None)
    p.add_argument("--dist", action="store_true")
    p.add_argument("--local", default=None, help="read this local dataset (no --remote)")
    p.add_argument("--shuffle-algo", default="astream")
    p.add_argument("--ncn", type=int, default=None)
    p.add_argument("--seed", type=int, default=9176)
    p.add_argument("--block", type=int, default=None)
    a = p.parse_args()
    if a.dist:
        import torch.distributed as dist

        dist.init_process_group("gloo")
    opts = {"endpoint_url": a.endpoint} if a.endpoint else None
    ds = StreamingDataset(
        remote=a.remote,
        local=a.local or a.cache_dir,
        batch_size=a.batch,
        shuffle=a.shuffle,
        shuffle_algo=a.shuffle_algo,
        num_canonical_nodes=a.ncn,
        shuffle_seed=a.seed,
        shuffle_block_size=a.block,
        cache_limit=a.cache_limit,
        storage_options=opts,
    )
    loader = StreamingDataLoader(ds, batch_size=a.batch, num_workers=a.workers, collate_fn=collate)
    out = f"{a.out}.{os.environ.get('RANK', '0')}"
    with open(out, "w") as f:
        for batch in loader:
            f.write(json.dumps(batch) + "\n")
            f.flush()
    if a.dist:
        import torch

        t = torch.tensor([1])
        dist.all_reduce(t)
        with open(out + ".world", "w") as f:
            f.write(str(int(t.item())))
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
