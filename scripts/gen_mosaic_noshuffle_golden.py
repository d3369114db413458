#!/usr/bin/env python
"""Regenerate tests/order/golden/mosaic/noshuffle.npz from the reference (mosaicml-streaming).

Usage:  python scripts/gen_mosaic_noshuffle_golden.py [--peer-python .bench/peers-venv/bin/python]

It re-executes itself under the peer venv's python (see scripts/peer.py) and records what the
reference deals with ``shuffle=False``: for every case of ``cases()``, the array its
``generate_work(batching_method, ...)`` returns (nodes, ranks, workers, batches, batch; ``-1``
fillers) for a dataset object set up as its ``StreamingDataset`` sets it up (each stream's
``choose`` and ``proportion`` from its own ``Stream.apply_weights``, its own
``resample_streams``; see ``gen_mosaic_order_golden._fake_dataset``). Without shuffling no
algorithm plays a part: the reference's ``shuffle_algo`` is left at its default, ``py1e``.

The cases: every batching method (random, stratified, per_stream, device_per_stream) x one
stream of 203 samples, two streams of equal ``proportion``, three streams weighted by
``choose`` and three by ``proportion`` with an ``epoch_size`` x canonical nodes 1/2/3 x the
worlds 1x1x1, 1x2x2, 2x2x1, 3x1x2 (where the reference accepts the pair) x (epoch 0, epoch 1,
epoch 1 resumed at 37). ``composition_cases()``: ``stratified`` over one rank with batch sizes
1..9, two streams of equal proportion and three streams weighted by proportion and by choose,
each global batch's make-up by stream (the reference's own rounding of the proportions).
A case the reference refuses is recorded with its error (an empty array).
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
OUT = os.path.join(ROOT, "tests", "order", "golden", "mosaic", "noshuffle.npz")

METHODS = ("random", "stratified", "per_stream", "device_per_stream")
STREAMS = {
    "one": {"sizes": [[7, 130, 1, 65]], "choose": None},
    "two_prop": {
        "sizes": [[40, 60, 3], [70, 36]],
        "choose": None,
        "proportion": [1.0, 1.0],
        "epoch_size": None,
    },
    "three_choose": {"sizes": [[40, 25, 61], [100, 3, 50], [70, 36]], "choose": [201, 61, 223]},
    "three_prop": {
        "sizes": [[40, 25, 61], [100, 3, 50], [70, 36]],
        "choose": None,
        "proportion": [0.5, 0.3, 0.2],
        "epoch_size": 410,
    },
}
SHAPES = ((1, 1, 1), (1, 2, 2), (2, 2, 1), (3, 1, 2))
BATCH = 4


def cases() -> list[dict]:
    """method x stream set x canonical nodes x shape x (epoch, resume position)."""
    out = []
    for method in METHODS:
        for streams in STREAMS:
            for ncn in (1, 2, 3):
                for shape in SHAPES:
                    pn = shape[0]
                    if ncn % pn and pn % ncn:
                        continue  # the reference refuses a fresh epoch on such a World
                    for epoch, start in ((0, 0), (1, 0), (1, 37)):
                        out.append(
                            {
                                "algo": "py1e",
                                "shuffle": False,
                                "ncn": ncn,
                                "shape": list(shape),
                                "epoch": epoch,
                                "start": start,
                                "streams": streams,
                                "block": 60,
                                "seed": 53,
                                "batching_method": method,
                                "partition_algo": "relaxed",
                                "batch": BATCH,
                                # "fixed" keeps a partial draw across epochs
                                "sampling_method": (
                                    "fixed" if (ncn, epoch) == (2, 1) else "balanced"
                                ),
                            }
                        )
    return out


COMPOSITION_STREAMS = {
    "two_eq": STREAMS["two_prop"],
    "three_prop": STREAMS["three_prop"],
    "three_choose": STREAMS["three_choose"],
}


def composition_cases() -> list[dict]:
    """stratified, one rank, batch sizes 1..9, per stream set."""
    out = []
    for streams in COMPOSITION_STREAMS:
        for batch in range(1, 10):
            out.append(
                {
                    "algo": "py1e",
                    "shuffle": False,
                    "ncn": 1,
                    "shape": [1, 1, 1],
                    "epoch": 0,
                    "start": 0,
                    "streams": streams,
                    "block": 60,
                    "seed": 59,
                    "batching_method": "stratified",
                    "partition_algo": "relaxed",
                    "batch": batch,
                }
            )
    return out


def _record(table: list[dict], stream_sets: dict, prefix: str, arrays: dict) -> None:
    import numpy as np
    from gen_mosaic_order_golden import _generic_work

    for k, c in enumerate(table):
        try:
            arrays[f"{prefix}{k}"] = np.asarray(_generic_work(c, stream_sets), np.int16)
        except ValueError as exc:  # the reference refuses the case: recorded, astream must too
            c["error"] = str(exc)
            arrays[f"{prefix}{k}"] = np.zeros(0, np.int16)


def _inner() -> None:
    import warnings

    import numpy as np

    warnings.simplefilter("ignore")
    arrays: dict = {}
    table = cases()
    _record(table, STREAMS, "", arrays)
    comp = composition_cases()
    _record(comp, COMPOSITION_STREAMS, "c", arrays)
    meta = {
        "reference": "mosaicml-streaming 0.13.0",
        "cases": table,
        "streams": STREAMS,
        "composition": comp,
        "composition_streams": COMPOSITION_STREAMS,
    }
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    np.savez_compressed(OUT, cases=json.dumps(meta), **arrays)


def main() -> int:
    return peer.main(__file__, __doc__, _inner)


if __name__ == "__main__":
    sys.exit(main())
