#!/usr/bin/env python
"""Regenerate tests/order/golden/mosaic/shuffle.npz from the reference (mosaicml-streaming 0.13.0).

Usage:  python scripts/gen_mosaic_order_golden.py [--peer-python /work/peervenv/bin/python]

It re-executes itself under the peer venv's python (see scripts/peer.py) and records, for every
case of ``CASES``, the reference's global sample order of one epoch:
``streaming.base.shuffle.get_shuffle(algo, shard_sizes, num_canonical_nodes, seed, epoch,
block_size)``. Each array is stored as int32 under the key ``"{case index}"``; the case table
itself (with the shard sizes) is stored as JSON under ``"cases"``.

``world.npz`` holds, for every case of ``world_cases()``, what the reference's random batching
(``generate_work_random_batching``, the function ``StreamingDataset`` iterates) deals to every
(node, rank, worker): its array ``[nodes, ranks, workers, batches, batch]`` with ``-1`` fillers,
as int16; ``resume.npz`` the same from reference checkpoints (``resume_cases``). Streams are
read whole; ``resampled.npz`` holds three streams resampled by ``choose`` (through the
reference's own ``resample_streams``). (``resample_streams`` of a whole stream: one shuffle unit per
shard, ids in index order).
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


STREAM_SETS = {
    "one": [[7, 130, 1, 55, 300, 12, 90, 45, 33, 200, 5, 82]],
    "three": [[40, 25, 61], [100, 3, 50], [70, 35]],
}
SHAPES = ((1, 1, 1), (1, 2, 2), (2, 2, 2))
BATCH = 4


def world_cases() -> list[dict]:
    """algorithm x canonical nodes x world shape x epoch x stream set, shuffled; and unshuffled
    (totals 960 and 384: multiples of 8 canonical nodes x 8 workers... no padding, see below)
    once per (canonical nodes, shape, epoch, stream set), as the algorithm plays no part."""
    out = []
    for algo in (*ALGOS, None):
        for ncn in (1, 2, 8):
            for shape in SHAPES:
                for epoch in (0, 1):
                    for streams in STREAM_SETS:
                        block = 100 if ncn != 2 else max(4_000_000 // ncn, 1 << 18)
                        out.append(
                            {
                                "algo": algo or "py1e",
                                "shuffle": algo is not None,
                                "ncn": ncn,
                                "shape": list(shape),
                                "epoch": epoch,
                                "streams": streams,
                                "block": block,
                                "seed": 17,
                                "partition_algo": "orig" if ncn == 8 else "relaxed",
                            }
                        )
    return out


def _reference_work(c: dict, start: int = 0):
    from types import SimpleNamespace

    import numpy as np
    from streaming.base.batching.random import generate_work_random_batching

    stream_sizes = STREAM_SETS[c["streams"]]
    flat = np.array([x for s in stream_sizes for x in s], np.int64)

    def resample_streams(epoch: int, stream_id: int | None = None):
        return flat.copy(), np.arange(int(flat.sum()), dtype=np.int64)

    fake = SimpleNamespace(
        num_canonical_nodes=c["ncn"],
        batch_size=BATCH,
        resample_streams=resample_streams,
        partition_algo=c["partition_algo"],
        epoch_size=int(flat.sum()),
        initial_physical_nodes=None,
        shuffle=c["shuffle"],
        shuffle_algo=c["algo"],
        shuffle_seed=c["seed"],
        shuffle_block_size=c["block"],
    )
    pn, rpn, workers = c["shape"]
    world = SimpleNamespace(num_nodes=pn, ranks_per_node=rpn, workers_per_rank=workers)
    return generate_work_random_batching(fake, world, c["epoch"], start)  # type: ignore[arg-type]


def _world() -> None:
    import numpy as np

    arrays = {}
    table = world_cases()
    for k, c in enumerate(table):
        arrays[str(k)] = np.asarray(_reference_work(c), np.int16)
    meta = {"reference": "mosaicml-streaming 0.13.0", "cases": table, "streams": STREAM_SETS}
    np.savez_compressed(os.path.join(OUT, "world.npz"), cases=json.dumps(meta), **arrays)


def resume_cases() -> list[dict]:
    """Checkpoints as the reference writes them (``StreamingDataset.state_dict``: the keys
    epoch, sample_in_epoch, num_canonical_nodes, shuffle_seed, initial_physical_nodes) at three
    positions of an epoch, per algorithm and shape; ``start`` 0 is the uninterrupted epoch."""
    out = []
    for algo in ALGOS:
        for shape in SHAPES:
            ranks = shape[0] * shape[1]
            for start in (0, 4 * ranks * 3, 4 * ranks * 50, 960 - 4 * ranks):
                out.append(
                    {
                        "algo": algo,
                        "shuffle": True,
                        "ncn": 2,
                        "shape": list(shape),
                        "epoch": 1,
                        "streams": "one",
                        "block": 100,
                        "seed": 23,
                        "partition_algo": "relaxed",
                        "state": {
                            "epoch": 1,
                            "sample_in_epoch": start,
                            "num_canonical_nodes": 2,
                            "shuffle_seed": 23,
                            "initial_physical_nodes": shape[0],
                        },
                    }
                )
    return out


def _resume() -> None:
    import numpy as np

    arrays = {}
    table = resume_cases()
    for k, c in enumerate(table):
        work = _reference_work(c, c["state"]["sample_in_epoch"])
        arrays[str(k)] = np.asarray(work, np.int16)
    meta = {"reference": "mosaicml-streaming 0.13.0", "cases": table, "streams": STREAM_SETS}
    np.savez_compressed(os.path.join(OUT, "resume.npz"), cases=json.dumps(meta), **arrays)


# three streams resampled: upsampled with a partial copy, downsampled, repeated twice
RESAMPLED = {"streams": "three", "choose": [200, 60, 220]}


def resampled_cases() -> list[dict]:
    """algorithm x canonical nodes x shape x epoch, three resampled streams; sampling_method
    balanced, granularity 1, except fixed / granularity 4 on epoch 1 with 2 canonical nodes."""
    out = []
    for algo in ALGOS:
        for ncn in (1, 2, 8):
            for shape in SHAPES:
                for epoch in (0, 1):
                    odd = epoch == 1 and ncn == 2
                    out.append(
                        {
                            "algo": algo,
                            "shuffle": True,
                            "ncn": ncn,
                            "shape": list(shape),
                            "epoch": epoch,
                            "streams": "three",
                            "choose": RESAMPLED["choose"],
                            "sampling_method": "fixed" if odd else "balanced",
                            "granularity": 4 if odd else 1,
                            "block": 100,
                            "seed": 31,
                            "partition_algo": "relaxed",
                        }
                    )
    return out


def _resampled_work(c: dict):
    from types import SimpleNamespace

    import numpy as np
    from streaming.base.batching.random import generate_work_random_batching
    from streaming.base.dataset import StreamingDataset

    stream_sizes = STREAM_SETS[c["streams"]]
    flat = np.array([x for s in stream_sizes for x in s], np.int64)
    counts = [len(s) for s in stream_sizes]
    fake = SimpleNamespace(
        shuffle_seed=c["seed"],
        sampling_method=c["sampling_method"],
        num_streams=len(stream_sizes),
        shard_offset_per_stream=np.cumsum([0, *counts[:-1]]).astype(np.int64),
        shards_per_stream=np.array(counts, np.int64),
        samples_per_shard=flat,
        sample_offset_per_shard=(np.cumsum(flat) - flat).astype(np.int64),
        streams=[SimpleNamespace(choose=x) for x in c["choose"]],
        sampling_granularity=c["granularity"],
        epoch_seed_change=c["shuffle"] and c["sampling_method"] == "balanced",
        num_canonical_nodes=c["ncn"],
        batch_size=BATCH,
        partition_algo=c["partition_algo"],
        epoch_size=sum(c["choose"]),
        initial_physical_nodes=None,
        shuffle=c["shuffle"],
        shuffle_algo=c["algo"],
        shuffle_block_size=c["block"],
    )
    fake.resample_streams = lambda epoch, stream_id=None: StreamingDataset.resample_streams(
        fake, epoch, stream_id
    )
    pn, rpn, workers = c["shape"]
    world = SimpleNamespace(num_nodes=pn, ranks_per_node=rpn, workers_per_rank=workers)
    return generate_work_random_batching(fake, world, c["epoch"], 0)  # type: ignore[arg-type]


def _resampled() -> None:
    import numpy as np

    arrays = {}
    table = resampled_cases()
    for k, c in enumerate(table):
        arrays[str(k)] = np.asarray(_resampled_work(c), np.int16)
    meta = {"reference": "mosaicml-streaming 0.13.0", "cases": table, "streams": STREAM_SETS}
    np.savez_compressed(os.path.join(OUT, "resampled.npz"), cases=json.dumps(meta), **arrays)


# Epochs that do not split evenly (the reference's padding): 203 samples in one stream, and three
# streams resampled by ``choose`` to 485; canonical nodes 1, 2, 3, 8 (3 and 8 do not divide
# either), fewer canonical than physical nodes (4x1x2 with 1 or 2 of them), resume positions not
# a multiple of the physical nodes (37).
UNEVEN_STREAMS = {
    "odd": {"sizes": [[7, 130, 1, 65]], "choose": None},
    "three_choose": {"sizes": [[40, 25, 61], [100, 3, 50], [70, 36]], "choose": [201, 61, 223]},
}
UNEVEN_SHAPES = ((1, 1, 1), (1, 2, 2), (2, 2, 2), (4, 1, 2))


def uneven_cases() -> list[dict]:
    """(algorithm or unshuffled) x canonical nodes 1/2/3/8 x shapes x both stream sets x
    (epoch 0, epoch 1, epoch 1 resumed at 37), where the reference accepts the World."""
    out = []
    for algo in (*ALGOS, None):
        for ncn in (1, 2, 3, 8):
            for shape in UNEVEN_SHAPES:
                pn = shape[0]
                if (ncn % pn) and (pn % ncn):
                    continue
                for streams in UNEVEN_STREAMS:
                    for epoch, start in ((0, 0), (1, 0), (1, 37)):
                        out.append(
                            {
                                "algo": algo or "py1e",
                                "shuffle": algo is not None,
                                "ncn": ncn,
                                "shape": list(shape),
                                "epoch": epoch,
                                "start": start,
                                "streams": streams,
                                "block": 60,
                                "seed": 41,
                                "batching_method": "random",
                                "partition_algo": "relaxed",
                            }
                        )
    return out


def _fake_dataset(c: dict, stream_sets: dict):
    """An object with the attributes the reference's batching and resampling read, set as its
    StreamingDataset sets them (``Stream.apply_weights``: absolute weights, so each stream's
    proportion is its share of the chosen samples)."""
    from types import SimpleNamespace

    import numpy as np
    from streaming.base.dataset import StreamingDataset

    spec = stream_sets[c["streams"]]
    stream_sizes = spec["sizes"]
    flat = np.array([x for s in stream_sizes for x in s], np.int64)
    counts = [len(s) for s in stream_sizes]
    if spec.get("proportion"):  # relative weights: the reference's own Stream.apply_weights
        from streaming.base.stream import Stream

        objs = [
            Stream(local=f"/nonexistent/{i}", proportion=p)
            for i, p in enumerate(spec["proportion"])
        ]
        per = np.array([sum(s) for s in stream_sizes], np.int64)
        Stream.apply_weights(objs, per, spec["epoch_size"], c["seed"])
        choose = [int(o.choose) for o in objs]
        props = np.array([o.proportion for o in objs], np.float64)
    else:
        choose = spec["choose"] or [sum(s) for s in stream_sizes]
        props = np.array(choose, np.int64) / np.array(choose, np.int64).sum()
    method = c.get("sampling_method", "balanced")
    fake = SimpleNamespace(
        shuffle_seed=c["seed"],
        sampling_method=method,
        num_streams=len(stream_sizes),
        shard_offset_per_stream=np.cumsum([0, *counts[:-1]]).astype(np.int64),
        shards_per_stream=np.array(counts, np.int64),
        samples_per_shard=flat,
        sample_offset_per_shard=(np.cumsum(flat) - flat).astype(np.int64),
        streams=[SimpleNamespace(choose=int(x), proportion=p) for x, p in zip(choose, props)],
        sampling_granularity=c.get("granularity", 1),
        epoch_seed_change=c["shuffle"] and method == "balanced",
        num_canonical_nodes=c["ncn"],
        batch_size=c.get("batch", BATCH),
        partition_algo=c["partition_algo"],
        epoch_size=int(sum(choose)),
        initial_physical_nodes=c.get("initial_physical_nodes"),
        shuffle=c["shuffle"],
        shuffle_algo=c["algo"],
        shuffle_block_size=c["block"],
    )
    fake.resample_streams = lambda epoch, stream_id=None: StreamingDataset.resample_streams(
        fake, epoch, stream_id
    )
    return fake


def _generic_work(c: dict, stream_sets: dict):
    from types import SimpleNamespace

    from streaming.base.batching import generate_work

    fake = _fake_dataset(c, stream_sets)
    pn, rpn, workers = c["shape"]
    world = SimpleNamespace(num_nodes=pn, ranks_per_node=rpn, workers_per_rank=workers)
    return generate_work(c["batching_method"], fake, world, c["epoch"], c["start"])  # type: ignore[arg-type]


BATCHING_STREAMS = {
    "three_choose": {"sizes": [[40, 25, 61], [100, 3, 50], [70, 36]], "choose": [201, 61, 223]},
    "three_prop": {
        "sizes": [[40, 25, 61], [100, 3, 50], [70, 36]],
        "choose": None,
        "proportion": [0.5, 0.3, 0.2],
        "epoch_size": 410,
    },
}


def batching_cases() -> list[dict]:
    """(algorithm or unshuffled) x batching method x canonical nodes 1/2/4 x shapes x both
    three-stream sets x (epoch 0, epoch 1, epoch 1 resumed at 3 global batches of 2x2x2)."""
    out = []
    for algo in (*ALGOS, None):
        for method in ("stratified", "per_stream", "device_per_stream"):
            for ncn in (1, 2, 4):
                for shape in SHAPES:
                    if method == "device_per_stream" and ncn % shape[0]:
                        continue
                    for streams in BATCHING_STREAMS:
                        for epoch, start in ((0, 0), (1, 0), (1, 48)):
                            out.append(
                                reference_case(
                                    algo,
                                    ncn,
                                    shape,
                                    epoch,
                                    start,
                                    streams,
                                    seed=43,
                                    batch=8,
                                    method=method,
                                )
                            )
    return out


def reference_case(
    algo: str | None, ncn: int, shape: tuple[int, int, int], epoch: int, start: int,
    streams: str, *, seed: int, batch: int, method: str, **extra: object,
) -> dict:  # fmt: skip
    """One case of a batching golden's table (``algo`` None: unshuffled, recorded as py1e;
    ``extra``: more settings, such as ``initial_physical_nodes``)."""
    return {
        "algo": algo or "py1e",
        "shuffle": algo is not None,
        "ncn": ncn,
        "shape": list(shape),
        "epoch": epoch,
        "start": start,
        "streams": streams,
        "block": 60,
        "seed": seed,
        "batching_method": method,
        "partition_algo": "relaxed",
        "batch": batch,
        **extra,
    }


def write_batching_golden(path: str, table: list[dict]) -> None:
    """The reference's work array of every case of ``table`` (over ``BATCHING_STREAMS``) as
    int16, or its refusal recorded in the case, saved to ``path`` with the table."""
    import numpy as np

    arrays = {}
    for k, c in enumerate(table):
        try:
            arrays[str(k)] = np.asarray(_generic_work(c, BATCHING_STREAMS), np.int16)
        except ValueError as exc:  # the reference refuses the case: recorded, astream must too
            c["error"] = str(exc)
            arrays[str(k)] = np.zeros(0, np.int16)
    meta = {"reference": "mosaicml-streaming 0.13.0", "cases": table, "streams": BATCHING_STREAMS}
    np.savez_compressed(path, cases=json.dumps(meta), **arrays)


def _batching() -> None:
    write_batching_golden(os.path.join(OUT, "batching.npz"), batching_cases())


# Resuming on a World whose nodes and canonical nodes do not divide one another: the reference's
# "relaxed" partition re-deals the initial World's order (its checkpoint's
# initial_physical_nodes) in global batches of the same size. (num_canonical_nodes, initial
# nodes, World, per-device batch): 24 = 2 nodes x 2 ranks x 6 = 3 x 2 x 4; 12 = 4 x 1 x 3 =
# 3 x 1 x 4 = 6 x 1 x 2.
REDEALS = ((2, 2, (3, 2, 2), 4), (4, 4, (3, 1, 1), 4), (4, 4, (6, 1, 2), 2))


def redeal_cases() -> list[dict]:
    out = []
    for algo in (*ALGOS, None):
        for ncn, initial, shape, batch in REDEALS:
            for streams in UNEVEN_STREAMS:
                for start in (0, 72, 37):
                    out.append(
                        reference_case(
                            algo,
                            ncn,
                            shape,
                            1,
                            start,
                            streams,
                            seed=47,
                            batch=batch,
                            method="random",
                            initial_physical_nodes=initial,
                        )
                    )
    return out


def _redeal() -> None:
    import numpy as np

    arrays = {}
    table = redeal_cases()
    for k, c in enumerate(table):
        arrays[str(k)] = np.asarray(_generic_work(c, UNEVEN_STREAMS), np.int16)
    meta = {"reference": "mosaicml-streaming 0.13.0", "cases": table, "streams": UNEVEN_STREAMS}
    np.savez_compressed(os.path.join(OUT, "redeal.npz"), cases=json.dumps(meta), **arrays)


def _uneven() -> None:
    import numpy as np

    arrays = {}
    table = uneven_cases()
    for k, c in enumerate(table):
        arrays[str(k)] = np.asarray(_generic_work(c, UNEVEN_STREAMS), np.int16)
    meta = {"reference": "mosaicml-streaming 0.13.0", "cases": table, "streams": UNEVEN_STREAMS}
    np.savez_compressed(os.path.join(OUT, "uneven.npz"), cases=json.dumps(meta), **arrays)


def _defaults() -> None:
    """``defaults.json``: the ``num_canonical_nodes`` and ``shuffle_block_size`` the reference's
    ``StreamingDataset`` picks when both are left unset (its own ``_resume`` on a fresh start),
    per algorithm, shuffle on/off, and physical node count."""
    from types import SimpleNamespace

    from streaming.base.dataset import StreamingDataset

    out = []
    for algo in ALGOS:
        for shuffle in (True, False):
            for nodes in (1, 2, 4):
                fake = SimpleNamespace(
                    _shm_prefix_int=987_654_321,  # no resume state under this name
                    num_canonical_nodes=None,
                    shuffle_block_size=None,
                    shuffle_algo=algo,
                    shuffle=shuffle,
                )
                world = SimpleNamespace(num_nodes=nodes, worker_of_rank=0)
                fake._set_shuffle_block_size = lambda w, f=fake: (
                    StreamingDataset._set_shuffle_block_size(f, w)
                )
                epoch, start = StreamingDataset._resume(fake, world, 0)  # type: ignore[arg-type]
                assert (epoch, start) == (0, 0)
                out.append(
                    {
                        "algo": algo,
                        "shuffle": shuffle,
                        "nodes": nodes,
                        "num_canonical_nodes": fake.num_canonical_nodes,
                        "shuffle_block_size": fake.shuffle_block_size,
                    }
                )
    meta = {"reference": "mosaicml-streaming 0.13.0", "cases": out}
    with open(os.path.join(OUT, "defaults.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")


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
    _world()
    _resume()
    _resampled()
    _uneven()
    _defaults()
    _batching()
    _redeal()


def main() -> int:
    return peer.main(__file__, __doc__, _inner)


if __name__ == "__main__":
    sys.exit(main())
