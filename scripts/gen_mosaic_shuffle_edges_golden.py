#!/usr/bin/env python
"""Regenerate tests/order/golden/mosaic/shuffle_edges.json from the reference (0.13.0).

Usage:  python scripts/gen_mosaic_shuffle_edges_golden.py --peer-python .bench/peers-venv/bin/python

Small shard vectors at the edges of the reference's shuffles, which the main matrix
(gen_mosaic_order_golden.py) does not reach: more canonical nodes than samples (empty parts, a
shard cut with no room left), zero-sample shards, one-sample shards, tiny blocks. For every case
it records ``streaming.base.shuffle.get_shuffle(algo, shard_sizes, num_canonical_nodes, seed,
epoch, block_size)`` as a list, or the reference's exception type and message.

``sampling`` records ``streaming.base.sampling.get_sampling`` (samples per shard of one stream)
and ``resampling`` the reference's ``StreamingDataset.resample_streams`` (shuffle units and
sample ids of all streams), called on a bare object that holds only the attributes it reads.
"""

from __future__ import annotations

try:
    import peer  # run as a script: scripts/ is sys.path[0]
except ImportError:  # imported by the tests as scripts.<name>, for its case table
    from scripts import peer

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "order", "golden", "mosaic", "shuffle_edges.json")

ALGOS = ("py1e", "py1br", "py1s", "py2s", "naive")
SHARDS = (
    [2],
    [1, 1],
    [3, 0, 2],
    [0, 5, 0, 4, 0],
    [3, 5, 2],
    [1, 1, 1, 1, 1, 1, 1],
    [6, 1, 9, 2],
)


def cases() -> list[dict]:
    """algorithm x shard vector x canonical nodes x block, two seeds/epochs each."""
    out = []
    for algo in ALGOS:
        for shards in SHARDS:
            for ncn in (1, 2, 3, 4):
                for block in (2, 4, 7):
                    for seed, epoch in ((3, 0), (11, 2)):
                        out.append(
                            {
                                "algo": algo,
                                "shards": shards,
                                "ncn": ncn,
                                "block": block,
                                "seed": seed,
                                "epoch": epoch,
                            }
                        )
    return out


SAMPLING = (
    ([4, 6, 5], (0, 15, 16, 14, 31, 1, 7, 29)),  # whole copies, remainders 0, 1 and more
    ([3, 0, 8, 1], (5, 12, 13, 25)),  # a zero-sample shard
    ([10], (3, 10, 11)),
)


def sampling_cases() -> list[dict]:
    """shard vector x choose x granularity x seed/epoch x use_epoch."""
    out = []
    for shards, chooses in SAMPLING:
        for choose in chooses:
            for gran in (1, 2, 3, 20):
                for seed, epoch in ((3, 0), (11, 2)):
                    for use_epoch in (False, True):
                        out.append(
                            {
                                "shards": shards,
                                "choose": choose,
                                "granularity": gran,
                                "seed": seed,
                                "epoch": epoch,
                                "use_epoch": use_epoch,
                            }
                        )
    return out


RESAMPLING = (
    ([[4, 6, 5], [3, 8]], [16, 7]),
    ([[4, 6, 5], [3, 8]], [15, 22]),
    ([[2, 9], [5], [1, 1, 4]], [3, 11, 6]),
)


def resampling_cases() -> list[dict]:
    """stream set x granularity x seed/epoch x sampling_method x epoch_seed_change."""
    out = []
    for streams, chosen in RESAMPLING:
        for gran in (1, 3):
            for seed, epoch in ((3, 0), (11, 2)):
                for balanced in (False, True):
                    for use_epoch in (False, True):
                        out.append(
                            {
                                "streams": streams,
                                "chosen": chosen,
                                "granularity": gran,
                                "seed": seed,
                                "epoch": epoch,
                                "balanced": balanced,
                                "use_epoch": use_epoch,
                            }
                        )
    return out


def _resampled(c: dict) -> dict:
    from types import SimpleNamespace

    import numpy as np
    from streaming.base.dataset import StreamingDataset

    sizes = [n for s in c["streams"] for n in s]
    counts = [len(s) for s in c["streams"]]
    fake = SimpleNamespace(
        shuffle_seed=c["seed"],
        sampling_method="balanced" if c["balanced"] else "fixed",
        num_streams=len(counts),
        shard_offset_per_stream=np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64),
        shards_per_stream=np.array(counts, np.int64),
        samples_per_shard=np.array(sizes, np.int64),
        streams=[SimpleNamespace(choose=k) for k in c["chosen"]],
        sampling_granularity=c["granularity"],
        epoch_seed_change=c["use_epoch"],
        sample_offset_per_shard=np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64),
    )
    units, ids = StreamingDataset.resample_streams(fake, c["epoch"])
    return dict(c, units=[int(x) for x in units], ids=[int(x) for x in ids])


def _inner() -> None:
    import numpy as np
    from streaming.base.shuffle import get_shuffle

    out = []
    for c in cases():
        try:
            got = get_shuffle(
                c["algo"],
                np.array(c["shards"], np.int64),
                c["ncn"],
                c["seed"],
                c["epoch"],
                c["block"],
            )
            out.append(dict(c, order=[int(x) for x in got]))
        except Exception as e:  # the reference's refusal is part of its behaviour
            out.append(dict(c, error=[type(e).__name__, str(e)]))
    from streaming.base.sampling import get_sampling

    sampling = []
    for c in sampling_cases():
        got = get_sampling(np.array(c["shards"], np.int64), c["choose"], c["granularity"],
                           c["seed"], c["epoch"], c["use_epoch"])  # fmt: skip
        sampling.append(dict(c, per_shard=[int(x) for x in got]))
    resampling = [_resampled(c) for c in resampling_cases()]
    golden = {"reference": "mosaicml-streaming 0.13.0", "cases": out, "sampling": sampling,
              "resampling": resampling}  # fmt: skip
    peer.write_golden(OUT, golden, separators=(",", ":"))


def main() -> int:
    return peer.main(__file__, __doc__, _inner)


if __name__ == "__main__":
    sys.exit(main())
