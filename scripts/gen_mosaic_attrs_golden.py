#!/usr/bin/env python
"""Regenerate tests/engine/golden/mosaic_attrs.json from the reference (mosaicml-streaming 0.13.0).

Usage:  python scripts/gen_mosaic_attrs_golden.py [--peer-python .bench/peers-venv/bin/python]

It re-executes itself under the peer venv's python (see scripts/peer.py), writes the three
small streams of ``scripts/gen_mosaic_mixing_golden.py`` with the reference's own
``MDSWriter``, and records, for each configuration of ``CASES``, the attributes a reference
``StreamingDataset`` shows (one process, one node):

- ``built``: right after construction, the settings the reference resolves there and the
  index's arrays (``samples_per_shard``, ``stream_per_shard``...);
- ``iterated``: after one whole iteration, the settings it fills in at its first iteration
  (``num_canonical_nodes``, ``shuffle_block_size``) and the others again;
- ``resumed``: a new dataset given ``load_state_dict(CHECKPOINT)`` then ``state_dict(0,
  True)`` (which reads the checkpoint, as an iteration would): its settings and the state it
  returns.

A case the reference refuses records the error instead. Every case names ``batch_size``: the
reference refuses to iterate without one, where astream takes the DataLoader's (or 1, warning;
docs/migrating.md).
"""

from __future__ import annotations

try:
    import peer  # run as a script: scripts/ is sys.path[0]
except ImportError:  # imported by the tests as scripts.<name>, for its tables
    from scripts import peer

import json
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "engine", "golden", "mosaic_attrs.json")

# the checkpoint each case's new dataset loads: another seed, canonical nodes and first World
CHECKPOINT = {
    "epoch": 0,
    "sample_in_epoch": 0,
    "num_canonical_nodes": 4,
    "shuffle_seed": 77,
    "initial_physical_nodes": 2,
}
SETTINGS = (
    "shuffle",
    "shuffle_algo",
    "shuffle_seed",
    "num_canonical_nodes",
    "shuffle_block_size",
    "partition_algo",
    "sampling_method",
    "sampling_granularity",
    "batching_method",
    "replication",
    "cache_limit",
    "allow_unsafe_types",
    "predownload",
    "epoch_seed_change",
    "initial_physical_nodes",
    "batch_size",
)
ARRAYS = (
    "samples_per_shard",
    "sample_offset_per_shard",
    "stream_per_shard",
    "shards_per_stream",
    "shard_offset_per_stream",
    "samples_per_stream",
    "sample_offset_per_stream",
)
COUNTS = ("num_samples", "size", "num_streams", "num_shards")
# streams by name (gen_mosaic_mixing_golden.STREAMS) with their weights, and the arguments
CASES: list[dict] = [
    {"streams": [{"name": "a"}], "kw": {"batch_size": 4, "shuffle_algo": "py1e"}},
    {"streams": [{"name": "a"}], "kw": {"shuffle": True, "shuffle_algo": "py1s", "batch_size": 1}},
    {"streams": [{"name": "c"}], "kw": {"shuffle": True, "shuffle_algo": "py2s", "batch_size": 7}},
    {
        "streams": [{"name": "a"}, {"name": "b"}],
        "kw": {
            "shuffle": True,
            "shuffle_algo": "py1br",
            "shuffle_seed": 123,
            "num_canonical_nodes": 8,
            "batch_size": 16,
            "cache_limit": "10mb",
            "predownload": 40,
        },
    },
    {
        "streams": [{"name": "a", "proportion": 0.3}, {"name": "c", "proportion": 0.7}],
        "kw": {
            "shuffle": True,
            "shuffle_algo": "naive",
            "epoch_size": 150,
            "sampling_method": "fixed",
            "sampling_granularity": 3,
            "batching_method": "stratified",
            "batch_size": 8,
        },
    },
    {
        "streams": [{"name": "b", "repeat": 2}, {"name": "c", "choose": 50}],
        "kw": {
            "shuffle": True,
            "shuffle_algo": "py1e",
            "shuffle_block_size": 300,
            "partition_algo": "orig",
            "batching_method": "per_stream",
            "allow_unsafe_types": True,
            "batch_size": 4,
        },
    },
    {
        "streams": [{"name": "a"}, {"name": "b"}, {"name": "c"}],
        "kw": {
            "shuffle": False,
            "shuffle_algo": "py1s",
            "batching_method": "device_per_stream",
            "cache_limit": 10_000_000,
            "replication": 1,
            "batch_size": 2,
        },
    },
    {
        "streams": [{"name": "c"}],
        "kw": {"shuffle": True, "shuffle_algo": "py1e", "batching_method": "x", "batch_size": 4},
    },
]


def _plain(v: object) -> object:
    import numpy as np

    if isinstance(v, np.ndarray):
        return [int(x) for x in v.tolist()]
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.bool_,)):
        return bool(v)
    return v


def _inner() -> None:
    import tempfile

    from gen_mosaic_mixing_golden import write_streams
    from streaming import MDSWriter, Stream, StreamingDataset

    table = [json.loads(json.dumps(c)) for c in CASES]
    with tempfile.TemporaryDirectory() as tmp:
        shards = {name: got[1] for name, got in write_streams(tmp, MDSWriter).items()}

        def build(case: dict, run: int):
            # the reference refuses a local directory another live dataset uses: one copy each
            streams = []
            for s in case["streams"]:
                src = os.path.join(tmp, s["name"])
                local = os.path.join(tmp, f"r{run}", s["name"])
                if not os.path.exists(local):
                    import shutil

                    shutil.copytree(src, local)
                weights = {k: v for k, v in s.items() if k != "name"}
                streams.append(Stream(local=local, **weights))
            return StreamingDataset(streams=streams, **case["kw"])

        def attrs(ds: object, names: tuple) -> dict:
            return {n: _plain(getattr(ds, n)) for n in names}

        for k, case in enumerate(table):
            try:
                ds = build(case, 3 * k)
                case["built"] = attrs(ds, SETTINGS + ARRAYS + COUNTS)
                for _ in ds:
                    pass
                case["iterated"] = attrs(ds, SETTINGS)
                del ds
                again = build(case, 3 * k + 1)
                again.load_state_dict(dict(CHECKPOINT))
                state = again.state_dict(0, True)
                case["resumed"] = {
                    "attrs": attrs(again, SETTINGS),
                    "state": {key: _plain(v) for key, v in state.items()},
                }
            except Exception as exc:  # the reference refuses it: astream must too
                case["error"] = f"{type(exc).__name__}: {exc}"
    meta = {"reference": "mosaicml-streaming 0.13.0", "checkpoint": CHECKPOINT, "shards": shards}
    peer.write_golden(OUT, {**meta, "cases": table}, indent=1)


if __name__ == "__main__":
    raise SystemExit(peer.main(__file__, __doc__, _inner, pythonpath=[ROOT]))
