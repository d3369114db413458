#!/usr/bin/env python
"""Regenerate tests/order/golden/mosaic/mixing.json from the reference (mosaicml-streaming 0.13.0).

Usage:  python scripts/gen_mosaic_mixing_golden.py [--peer-python .bench/peers-venv/bin/python]

It re-executes itself under the peer venv's python (see scripts/peer.py), writes the three
small streams of ``STREAMS`` with the reference's own ``MDSWriter`` into a temporary directory,
and records, for every case of ``cases()``, each stream's ``choose`` as the reference resolves
it and the ids of the samples its ``StreamingDataset`` yields in one process (one rank, no
DataLoader) over two iterations (epochs 0 and 1), then what a new dataset yields after loading
its ``state_dict`` taken halfway through epoch 1 (and that state's epoch and position), or the
error it raises. The cases weigh streams relatively (``proportion``, with and without
``epoch_size``) or give unweighted streams an ``epoch_size``: the two ways the reference splits
an epoch over its streams with a seeded draw (``Stream.apply_weights``), across every reference
shuffle algorithm, batching method, sampling method and granularity; then ``EMPTY``: epochs
smaller than one batch.
Each stream's samples per shard are stored too, so a test that writes the same streams with
astream's writer can check it wrote the same shards. The table comes from a seeded draw
(``random.Random(SEED)``), so a regeneration gives the same cases.
"""

from __future__ import annotations

try:
    import peer  # run as a script: scripts/ is sys.path[0]
except ImportError:  # imported by the tests as scripts.<name>, for its tables
    from scripts import peer

import json
import os
import random
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "order", "golden", "mosaic", "mixing.json")

# name -> (samples, size_limit); sample i of stream k: {"id": 1000 * k + i, "pad": i % 37 bytes}
STREAMS = {"a": (97, 700), "b": (53, 1500), "c": (211, 400)}
ALGOS = ("py1e", "py1br", "py1s", "py2s", "naive")
SEED = 20261203
CASES = 40


def sample(k: int, i: int) -> dict:
    return {"id": 1000 * k + i, "pad": b"x" * (i % 37)}


def write_streams(
    root: str, writer: Any, expect: dict[str, list[int]] | None = None
) -> dict[str, tuple[str, list[int]]]:
    """Write the streams of ``STREAMS`` under ``root`` with ``writer`` (either library's
    ``MDSWriter``): name -> (directory, samples per shard as its index.json lists them).
    ``expect``: a golden file's samples per shard, which each stream must have (a test's
    streams are then the shards the reference read)."""
    out = {}
    for k, (name, (n, limit)) in enumerate(sorted(STREAMS.items())):
        path = os.path.join(root, name)
        with writer(out=path, columns={"id": "int", "pad": "bytes"}, size_limit=limit) as w:
            for i in range(n):
                w.write(sample(k, i))
        with open(os.path.join(path, "index.json")) as f:
            out[name] = (path, [s["samples"] for s in json.load(f)["shards"]])
        if expect is not None and out[name][1] != expect[name]:
            raise AssertionError(f"stream {name}: shards of {out[name][1]}, not {expect[name]}")
    return out


def cases() -> list[dict]:
    rng = random.Random(SEED)
    out = []
    while len(out) < CASES:
        names = rng.sample(sorted(STREAMS), rng.choice([1, 2, 2, 3, 3]))
        relative = len(names) > 1 and rng.random() < 0.75
        streams = []
        for nm in names:
            s: dict = {"name": nm}
            if relative:
                s["proportion"] = rng.choice([0.2, 0.3, 0.5, 1.0, 1.5])
            streams.append(s)
        case = {
            "streams": streams,
            "shuffle": rng.random() < 0.75,
            "shuffle_algo": rng.choice(ALGOS),
            "shuffle_seed": rng.randrange(10_000),
            "shuffle_block_size": rng.choice([16, 50, 300]),
            "num_canonical_nodes": rng.choice([1, 2, 3, 8]),
            "batch_size": rng.choice([1, 4, 7, 16]),
            "sampling_method": rng.choice(["balanced", "fixed"]),
            "sampling_granularity": rng.choice([1, 1, 3]),
            "batching_method": rng.choice(
                ["random", "random", "stratified", "per_stream", "device_per_stream"]
            ),
        }
        if not relative or rng.random() < 0.6:
            case["epoch_size"] = rng.choice([90, 100, 257, 301, 400])
        out.append(case)
    return out + EMPTY


def _empty(streams: list[str], method: str, epoch: int, batch: int) -> dict:
    return {
        "streams": [{"name": nm} for nm in streams],
        "shuffle": True,
        "shuffle_algo": "naive",
        "shuffle_seed": 6781,
        "num_canonical_nodes": 2,
        "batch_size": batch,
        "sampling_method": "balanced",
        "batching_method": method,
        "epoch_size": epoch,
    }


# epochs too small for one whole batch of a stream: the batching methods that drop a stream's
# partial batches yield nothing (astream failed on an empty batch table; found by
# scripts/diff_reference.py --seed 20261204); the others yield the samples
EMPTY = [
    _empty(["a"], "stratified", 10, 16),
    _empty(["a", "b"], "stratified", 12, 16),
    _empty(["a", "b", "c"], "per_stream", 20, 16),
    _empty(["a", "c"], "device_per_stream", 9, 7),
    _empty(["b"], "random", 10, 16),
]


def _inner() -> None:
    import tempfile

    from streaming import MDSWriter, Stream, StreamingDataset

    table = cases()
    with tempfile.TemporaryDirectory() as tmp:
        shards = {name: got[1] for name, got in write_streams(tmp, MDSWriter).items()}
        for case in table:
            kw = {k: v for k, v in case.items() if k != "streams"}

            def made(case: dict = case) -> list:
                return [
                    Stream(local=os.path.join(tmp, s["name"]), proportion=s.get("proportion"))
                    for s in case["streams"]
                ]

            streams = made()
            try:
                ds = StreamingDataset(streams=streams, **kw)
                case["choose"] = [int(s.choose) for s in streams]  # as apply_weights set it
                case["epochs"] = [[int(s["id"]) for s in ds] for _ in range(2)]
                # a checkpoint halfway through the epoch just iterated (1), resumed by a new dataset
                half = len(case["epochs"][0]) // 2
                state = ds.state_dict(half, True)
                case["state"] = [int(state["epoch"]), int(state["sample_in_epoch"])]
                again = StreamingDataset(streams=made(), **kw)
                again.load_state_dict(state)
                case["resumed"] = [half, [int(s["id"]) for s in again]]
            except Exception as exc:  # the reference refuses it: astream must too
                case["error"] = f"{type(exc).__name__}: {exc}"
    meta = {"reference": "mosaicml-streaming 0.13.0", "streams": STREAMS, "shards": shards}
    with open(OUT, "w") as f:
        json.dump({**meta, "cases": table}, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    raise SystemExit(peer.main(__file__, __doc__, _inner, pythonpath=[ROOT]))
