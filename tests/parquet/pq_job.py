"""A training-like job over a Parquet stream, run under torchrun by test_multiprocess.py.

One epoch through a StreamingDataLoader; writes each batch's labels, one JSON list per line,
to ``--out.RANK``. ``--stop-after K`` stops after K batches and (rank 0) writes the loader's
``state_dict()`` to ``--out.state``; ``--resume FILE`` loads such a state first. Ranks and world
size come from torchrun's environment; the gloo group is initialised here (never by astream)
and an all-reduce proves the ranks ran together.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import torch.distributed as dist

from astream import StreamingDataLoader, StreamingDataset


def collate(batch: list[dict[str, Any]]) -> list[int]:
    return [int(s["label"]) for s in batch]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--remote", required=True)
    p.add_argument("--cache-dir", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--stop-after", type=int, default=None)
    p.add_argument("--resume", default=None)
    a = p.parse_args()
    dist.init_process_group("gloo")
    ds = StreamingDataset(
        remote=a.remote,
        local=a.cache_dir,
        format="parquet",
        columns=["label"],
        batch_size=a.batch,
        shuffle=True,
        num_canonical_nodes=2,
    )
    loader = StreamingDataLoader(ds, batch_size=a.batch, num_workers=a.workers, collate_fn=collate)
    if a.resume:
        with open(a.resume) as f:
            loader.load_state_dict(json.load(f))
    rank = dist.get_rank()
    with open(f"{a.out}.{rank}", "w") as f:
        for k, batch in enumerate(loader, 1):
            f.write(json.dumps(batch) + "\n")
            if a.stop_after is not None and k == a.stop_after:
                if rank == 0:
                    with open(f"{a.out}.state", "w") as g:
                        json.dump(loader.state_dict(), g)
                break
    import torch

    t = torch.tensor([1])
    dist.all_reduce(t)
    with open(f"{a.out}.{rank}.world", "w") as f:
        f.write(str(int(t.item())))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
