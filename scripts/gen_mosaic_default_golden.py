#!/usr/bin/env python
"""Record the reference's order at its default arguments (tests/order/test_reference_default).

Usage:  python scripts/gen_mosaic_default_golden.py [--peer-python .bench/peers-venv/bin/python]

It re-executes itself under the peer venv's python (see scripts/peer.py). The dataset is the
203-sample one ``scripts/gen_mosaic_job_golden.py`` wrote with the reference's ``MDSWriter``
(``tests/order/golden/mosaic/jobs/data``, column ``x`` = the sample index). Every reference
``StreamingDataset`` here names only ``local``, ``shuffle=True``, ``shuffle_seed`` and
``batch_size``: ``shuffle_algo``, ``num_canonical_nodes``, ``shuffle_block_size``,
``partition_algo``, ``sampling_method`` and ``batching_method`` are the reference's defaults,
resolved by its own ``_resume`` on the World of each shape of ``SHAPES`` (nodes x ranks per
node x DataLoader workers) and dealt by its own ``generate_work``. One process plays rank 0 of
each shape, given the reference's ``World`` of that shape (``_resume``, ``state_dict``): a
process group of several nodes cannot be formed on one machine, and nothing else of the
reference's resolution reads the process group.

For each shape, ``default.json`` holds the settings the reference resolved and, per rank, the
batches its DataLoader yields (batch ``j`` from worker ``j % workers``, exhausted workers
skipped): epoch 0, epoch 1, and the rest of epoch 0 after a checkpoint the reference wrote at
``STOP`` global batches (the checkpoint itself too). The one-process shapes are also run
end to end through the reference's ``StreamingDataLoader`` (real workers, a real
``state_dict``/``load_state_dict``), and those runs must equal the dealt work: the generator
stops otherwise.
"""

from __future__ import annotations

try:
    import peer  # run as a script: scripts/ is sys.path[0]
except ImportError:  # imported by the tests as scripts.<name>, for its tables
    from scripts import peer

import os
import shutil
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "order", "golden", "mosaic", "jobs", "data")
OUT = os.path.join(ROOT, "tests", "order", "golden", "mosaic", "default.json")
SHAPES = ((1, 1, 1), (1, 1, 2), (1, 2, 2), (2, 2, 1), (2, 1, 2))
SEED = 1234
BATCH = 4
STOP = 5  # global batches consumed before the checkpoint
SETTINGS = (
    "shuffle_algo",
    "num_canonical_nodes",
    "shuffle_block_size",
    "partition_algo",
    "sampling_method",
    "batching_method",
    "sampling_granularity",
)


def _dataset(local: str):
    from streaming import StreamingDataset

    return StreamingDataset(local=local, shuffle=True, shuffle_seed=SEED, batch_size=BATCH)


def _rank_batches(work, node: int, local: int) -> list[list[int]]:
    """What one rank's DataLoader yields from the dealt work ``[nodes, ranks, workers, ...]``."""
    per_worker = []
    for w in range(work.shape[2]):
        ids = [int(x) for x in work[node, local, w].flatten() if x != -1]
        per_worker.append([ids[i : i + BATCH] for i in range(0, len(ids), BATCH)])
    out, j = [], 0
    while any(j < len(b) for b in per_worker):
        out += [b[j] for b in per_worker if j < len(b)]
        j += 1
    return out


def _dealt(shape: tuple[int, int, int], local: str, epoch: int, state: dict | None):
    """The reference's own resolution and dealing on ``shape`` (as rank 0 sees it)."""
    from streaming.base.batching import generate_work
    from streaming.base.util import clean_stale_shared_memory
    from streaming.base.world import World

    nodes, rpn, workers = shape
    clean_stale_shared_memory()
    ds = _dataset(local)
    if state is not None:
        ds.load_state_dict(state)
    world = World(nodes, rpn, workers, 0)
    got_epoch, start = ds._resume(world, epoch)
    assert got_epoch == epoch, (got_epoch, epoch)
    work = generate_work(ds.batching_method, ds, world, epoch, start)
    settings = {name: getattr(ds, name) for name in SETTINGS}
    ranks = [_rank_batches(work, r // rpn, r % rpn) for r in range(nodes * rpn)]
    return ds, settings, ranks


def _checkpoint(shape: tuple[int, int, int], local: str) -> dict:
    """The reference's ``state_dict`` after ``STOP`` global batches of epoch 0."""
    from streaming.base.util import clean_stale_shared_memory
    from streaming.base.world import World

    nodes, rpn, _ = shape
    clean_stale_shared_memory()
    ds = _dataset(local)
    ds._parallel_rank_world = World(nodes, rpn, 1, 0)  # rank 0 of the shape (see the doc)
    ds.next_epoch = 1  # as after the first iteration's _resume_incr_epoch
    return ds.state_dict(STOP * BATCH * nodes * rpn, False)


def _collate(batch):
    import torch  # the reference's loader counts samples by len(batch[0])

    return torch.tensor([int(s["x"]) for s in batch])


def _end_to_end(shape: tuple[int, int, int], local: str) -> dict:
    """A one-process shape through the reference's StreamingDataLoader, end to end."""
    from streaming import StreamingDataLoader
    from streaming.base.util import clean_stale_shared_memory

    def loader():
        clean_stale_shared_memory()
        return StreamingDataLoader(
            _dataset(local), batch_size=BATCH, num_workers=shape[2], collate_fn=_collate
        )

    ld = loader()
    epoch0 = [b.tolist() for b in ld]
    epoch1 = [b.tolist() for b in ld]
    ld = loader()
    consumed = []
    for batch in ld:
        consumed.append(batch.tolist())
        if len(consumed) == STOP:
            break
    state = ld.state_dict()
    del ld
    ld = loader()
    ld.load_state_dict(state)
    return {"epoch0": epoch0, "epoch1": epoch1, "state": state, "resumed": [b.tolist() for b in ld]}


def _inner() -> None:
    import warnings

    warnings.simplefilter("ignore")
    work_dir = tempfile.mkdtemp(prefix="mosaic-default-")
    local = os.path.join(work_dir, "data")
    shutil.copytree(DATA, local)
    cases = []
    try:
        for shape in SHAPES:
            _, settings, epoch0 = _dealt(shape, local, 0, None)
            _, _, epoch1 = _dealt(shape, local, 1, None)
            state = _checkpoint(shape, local)
            _, _, resumed = _dealt(shape, local, 0, state)
            case = {"shape": list(shape), "settings": settings, "state": state,
                    "epoch0": epoch0, "epoch1": epoch1, "resumed": resumed}  # fmt: skip
            if shape[:2] == (1, 1):
                real = _end_to_end(shape, local)
                assert real["epoch0"] == epoch0[0], shape
                assert real["epoch1"] == epoch1[0], shape
                assert real["resumed"] == resumed[0], shape
                assert {k: real["state"][k] for k in state} == state, (real["state"], state)
            for r, rest in enumerate(resumed):
                assert epoch0[r][:STOP] + rest == epoch0[r], (shape, r)
            cases.append(case)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    meta = {"reference": "mosaicml-streaming 0.13.0", "seed": SEED, "batch": BATCH,
            "stop": STOP, "cases": cases}  # fmt: skip
    peer.write_golden(OUT, meta, indent=None)


def main() -> int:
    return peer.main(__file__, __doc__, _inner)


if __name__ == "__main__":
    sys.exit(main())
