#!/usr/bin/env python
"""Regenerate tests/order/golden/mosaic/shuffle.npz from the reference (mosaicml-streaming 0.13.0).

Usage:  python scripts/gen_mosaic_order_golden.py [--peer-python /work/peervenv/bin/python]

It re-executes itself under the peer venv's python (see scripts/peer.py) and records, for every
case of ``CASES``, the reference's global sample order of one epoch:
``streaming.base.shuffle.get_shuffle(algo, shard_sizes, num_canonical_nodes, seed, epoch,
block_size)``. Each array is stored as int32 under the key ``"{case index}"``; the case table
itself (with the shard sizes) is stored as JSON under ``"cases"``.
"""

from __future__ import annotations

try:
    import peer  # run as a script: scripts/ is sys.path[0]
except ImportError:  # imported by the tests as scripts.<name>, for its case tables
    from scripts import peer

import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "order", "golden", "mosaic")

ALGOS = ("py1e", "py1br", "py1s", "py2s", "naive")
# Shard size vectors: even shards; irregular shards (some larger than the block, so py1e's
# clipped-shift branch and shard splits at canonical-node boundaries are both exercised).
SHARDS = {
    "even": [64] * 24,
    "ragged": [7, 130, 1, 55, 300, 12, 90, 45, 33, 200, 5, 77, 64, 150, 9, 21],
}
BLOCKS = (40, 1 << 18)


def cases() -> list[dict]:
    """The case table: algorithm x canonical nodes x shard vector x block size x epoch."""
    out = []
    for algo in ALGOS:
        for ncn in (1, 2, 8):
            for shards in SHARDS:
                for block in BLOCKS:
                    for epoch in (0, 1):
                        seed = 9176 + ncn
                        out.append(
                            {
                                "algo": algo,
                                "ncn": ncn,
                                "shards": shards,
                                "block": block,
                                "epoch": epoch,
                                "seed": seed,
                            }
                        )
    return out


def _inner() -> None:
    import warnings

    import numpy as np
    from streaming.base.shuffle import get_shuffle

    warnings.simplefilter("ignore")
    os.makedirs(OUT, exist_ok=True)
    arrays = {}
    table = cases()
    for k, c in enumerate(table):
        sizes = np.array(SHARDS[c["shards"]], np.int64)
        ids = get_shuffle(c["algo"], sizes, c["ncn"], c["seed"], c["epoch"], c["block"])
        arrays[str(k)] = np.asarray(ids, np.int32)
    meta = {"reference": "mosaicml-streaming 0.13.0", "cases": table, "shards": SHARDS}
    np.savez_compressed(os.path.join(OUT, "shuffle.npz"), cases=json.dumps(meta), **arrays)


def main() -> int:
    return peer.main(__file__, __doc__, _inner)


if __name__ == "__main__":
    sys.exit(main())
