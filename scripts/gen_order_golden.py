#!/usr/bin/env python
"""Regenerate tests/order/golden/*.json from the reference (mosaicml-streaming 0.13.0).

Usage:  python scripts/gen_order_golden.py [--peer-python /work/peervenv/bin/python]

Like scripts/gen_golden.py, it re-executes itself under the peer venv's python with a stub
``torchvision`` on PYTHONPATH. What it records:

- ``partitions.json``: for (samples, canonical nodes, nodes, ranks per node, workers per rank,
  batch size, resume position) cases, the batches each rank yields under the reference's
  partition (``get_partitions``, default algorithm), in the order a DataLoader yields them
  (batch ``j`` from worker ``j % workers``; the reference's ``-1`` fillers dropped). The sample
  order is unshuffled, so a position is its sample id.
- ``per_stream.json``: the batches each rank yields under ``per_stream`` and
  ``device_per_stream`` batching, unshuffled full streams (ids offset per stream).
- ``index_order.json``: the reference's unshuffled epoch sequence (``resample_streams``, which
  is what ``shuffle=False`` iterates in) for partly sampled and upsampled streams, over a few
  epochs and both sampling methods.
"""

from __future__ import annotations

try:
    import peer  # run as a script: scripts/ is sys.path[0]
except ImportError:  # imported by the tests as scripts.<name>, for its case tables
    from scripts import peer

import json
import os
import sys
from types import SimpleNamespace

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "order", "golden")

# (num_samples, ncn, num_nodes, ranks_per_node, workers_per_rank, batch_size, drop_first)
# ncn divides num_samples (else the reference also repeats samples of its shorter canonical
# nodes: a documented difference) and drop_first is a multiple of num_nodes (else the reference
# rounds it down).
PARTITION_CASES = [
    (50, 1, 1, 1, 1, 32, 0),
    (5_000, 1, 1, 1, 2, 32, 0),
    (50, 1, 1, 4, 2, 4, 0),
    (50, 2, 2, 3, 1, 4, 0),
    (51, 3, 3, 2, 2, 5, 0),
    (100, 4, 2, 3, 2, 7, 10),
    (1000, 8, 4, 8, 3, 8, 0),
    (1000, 8, 4, 8, 3, 8, 996),
    (5, 1, 1, 8, 1, 1, 0),
    (3, 1, 1, 8, 2, 2, 0),
    (13, 1, 1, 8, 1, 2, 0),
    (60, 4, 2, 4, 2, 3, 6),
    (77, 7, 7, 3, 1, 2, 0),
    (77, 7, 1, 6, 2, 5, 14),
    (24, 2, 4, 2, 1, 2, 0),
    (24, 2, 4, 2, 1, 2, 8),
    (97, 1, 1, 5, 3, 4, 37),
    (200, 4, 4, 2, 2, 16, 100),
]

# (batching method, stream sizes, ncn, num_nodes, ranks_per_node, workers_per_rank, batch size)
# ncn divides every stream size (else the reference pads canonical nodes); device_per_stream
# with ncn == num_nodes (the reference then cuts device batches per canonical node, as astream)
PER_STREAM_CASES = [
    ("per_stream", [40, 24, 56], 1, 1, 1, 1, 8),
    ("per_stream", [40, 24, 56], 2, 2, 2, 2, 2),
    ("per_stream", [40, 24, 56], 4, 2, 1, 3, 4),
    ("per_stream", [48, 32, 64], 8, 4, 2, 1, 2),
    ("device_per_stream", [40, 24, 56], 1, 1, 1, 1, 8),
    ("device_per_stream", [40, 24, 56], 2, 2, 2, 1, 2),
    ("device_per_stream", [48, 32, 64], 4, 4, 1, 2, 4),
    ("device_per_stream", [48, 32, 64], 2, 2, 2, 2, 4),
]

# (shard sizes, choose, granularity)
INDEX_ORDER_CASES = [
    ([10, 7, 12, 5, 9], 20, 1),
    ([10, 7, 12, 5, 9], 101, 1),
    ([30, 30, 30], 40, 4),
    ([8, 0, 6], 5, 1),
]


def _rank_batches(parts, node: int, local: int) -> list[list[int]]:
    workers, batches = parts.shape[2], parts.shape[3]
    out = []
    for b in range(batches):
        for w in range(workers):
            batch = [int(x) for x in parts[node, local, w, b] if x != -1]
            if batch:
                out.append(batch)
    return out


def _partitions() -> list[dict]:
    from streaming.base.partition import get_partitions

    cases = []
    for n, ncn, pn, rpn, workers, bs, drop in PARTITION_CASES:
        parts = get_partitions("relaxed", n, ncn, pn, rpn, workers, bs, drop)
        ranks = [_rank_batches(parts, g // rpn, g % rpn) for g in range(pn * rpn)]
        cases.append(
            {
                "num_samples": n,
                "num_canonical_nodes": ncn,
                "num_nodes": pn,
                "ranks_per_node": rpn,
                "workers_per_rank": workers,
                "batch_size": bs,
                "start": drop,
                "rank_batches": ranks,
            }
        )
    return cases


def _index_order() -> list[dict]:
    import numpy as np
    from streaming.base.dataset import StreamingDataset

    cases = []
    for sizes, choose, gran in INDEX_ORDER_CASES:
        for method in ("balanced", "fixed"):
            epochs = []
            for epoch in range(3):
                fake = SimpleNamespace(
                    shuffle_seed=9,
                    sampling_method=method,
                    num_streams=1,
                    shard_offset_per_stream=np.array([0]),
                    shards_per_stream=np.array([len(sizes)]),
                    samples_per_shard=np.array(sizes, np.int64),
                    sample_offset_per_shard=np.cumsum([0, *sizes[:-1]]).astype(np.int64),
                    streams=[SimpleNamespace(choose=choose)],
                    sampling_granularity=gran,
                    epoch_seed_change=False,  # shuffle=False
                )
                _, ids = StreamingDataset.resample_streams(fake, epoch)  # type: ignore[arg-type]
                epochs.append([int(x) for x in ids])
            cases.append(
                {
                    "shard_sizes": sizes,
                    "choose": choose,
                    "granularity": gran,
                    "sampling_method": method,
                    "epochs": epochs,
                }
            )
    return cases


def _fake_streams(sizes: list[int], ncn: int, bs: int):
    """The attributes the reference's per-stream batching reads, for full unshuffled streams
    (stream ``s`` holds ids ``offset_s .. offset_s + size_s``)."""
    import numpy as np

    offsets = np.cumsum([0, *sizes[:-1]])

    def resample_streams(epoch: int, stream_id: int):
        n = sizes[stream_id]
        return np.array([n], np.int64), offsets[stream_id] + np.arange(n, dtype=np.int64)

    return SimpleNamespace(
        num_canonical_nodes=ncn,
        batch_size=bs,
        streams=[SimpleNamespace(proportion=1 / len(sizes)) for _ in sizes],
        resample_streams=resample_streams,
        partition_algo="relaxed",
        initial_physical_nodes=None,
        shuffle=False,
        shuffle_seed=4,
        epoch_seed_change=False,
    )


def _per_stream_batching() -> list[dict]:
    """Global batches (per_stream) and device batches (device_per_stream), each as a sorted id
    list, in the order the reference yields them, for unshuffled full streams."""
    from streaming.base.batching.device_per_stream import (
        generate_work_device_per_stream_batching,
    )
    from streaming.base.batching.per_stream import generate_work_per_stream_batching

    cases = []
    for method, sizes, ncn, pn, rpn, workers, bs in PER_STREAM_CASES:
        fake = _fake_streams(sizes, ncn, bs)
        world = SimpleNamespace(num_nodes=pn, ranks_per_node=rpn, workers_per_rank=workers)
        gen = (
            generate_work_per_stream_batching
            if method == "per_stream"
            else generate_work_device_per_stream_batching
        )
        parts = gen(fake, world, 0, 0)  # type: ignore[arg-type]
        ranks = [_rank_batches(parts, g // rpn, g % rpn) for g in range(pn * rpn)]
        cases.append(
            {
                "batching_method": method,
                "stream_sizes": sizes,
                "num_canonical_nodes": ncn,
                "num_nodes": pn,
                "ranks_per_node": rpn,
                "workers_per_rank": workers,
                "batch_size": bs,
                "rank_batches": ranks,
            }
        )
    return cases


def _inner() -> None:
    os.makedirs(OUT, exist_ok=True)
    for name, data in (
        ("partitions", _partitions()),
        ("index_order", _index_order()),
        ("per_stream", _per_stream_batching()),
    ):
        with open(os.path.join(OUT, f"{name}.json"), "w") as f:
            json.dump({"reference": "mosaicml-streaming 0.13.0", "cases": data}, f)
            f.write("\n")


def main() -> int:
    return peer.main(__file__, __doc__, _inner)


if __name__ == "__main__":
    sys.exit(main())
