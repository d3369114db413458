"""One rank of a packed-training job, launched by tests/packing/test_multirank.py with torchrun.

Reads RANK/WORLD_SIZE like any torchrun job, initialises a gloo process group, and with 2
DataLoader workers: (1) iterates the whole packed epoch and keeps every batch; (2) iterates
again, stops after ``--stop`` batches and takes the loader's state; (3) gathers every rank's
state over the process group, merges them, and resumes a fresh dataset and loader from the
merged state. Writes JSON to ``--out.RANK``: the tokens of (1) without padding, whether
(2) + (3) equals (1) batch for batch, and the batch counts.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import numpy as np
import torch.distributed as dist

from astream import StreamingDataLoader, StreamingDataset
from astream.packing import merge_states


def batches(loader: Any, stop: int | None = None) -> list[dict[str, np.ndarray]]:
    out = []
    for b in loader:
        out.append({k: v.numpy().copy() for k, v in b.items()})
        if stop is not None and len(out) == stop:
            break
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--seq-len", type=int, default=48)
    p.add_argument("--stop", type=int, default=3)
    a = p.parse_args()
    dist.init_process_group("gloo")

    def loader() -> StreamingDataLoader:
        ds = StreamingDataset(local=a.data, batch_size=4, shuffle=True, shuffle_seed=11,
                              shuffle_block_size=64, pack_to=a.seq_len)  # fmt: skip
        return StreamingDataLoader(ds, batch_size=2, num_workers=2)

    full = batches(loader())
    first = loader()
    head = batches(first, a.stop)
    states: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(states, first.state_dict())
    again = loader()
    again.load_state_dict(merge_states(states))
    rest = batches(again)
    keys = ("input_ids", "position_ids", "segment_ids")
    exact = len(head) + len(rest) == len(full) and all(
        np.array_equal(x[k], y[k]) for x, y in zip(head + rest, full) for k in keys
    )
    tokens = [int(t) for b in full for t in b["input_ids"][b["segment_ids"] > 0].tolist()]
    with open(f"{a.out}.{os.environ['RANK']}", "w") as f:
        json.dump({"tokens": tokens, "exact": exact, "batches": len(full), "rest": len(rest)}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
