#!/usr/bin/env python
"""Record real mosaicml-streaming 0.13.0 jobs stopped mid-epoch (tests/engine/test_reference_job).

Usage:  python scripts/gen_mosaic_job_golden.py [--peer-python /work/peervenv/bin/python]

It re-executes itself under the peer venv's python (see scripts/peer.py). It writes, with the
reference's own ``MDSWriter``, a 203-sample dataset (column ``x`` = the sample index, shards of
uneven sizes) to ``tests/order/golden/mosaic/jobs/data``, then for every job of ``JOBS`` runs the
reference's ``StreamingDataset`` + ``StreamingDataLoader`` (2 DataLoader workers, batch 4, one
rank):

1. the whole epoch 0, uninterrupted: every batch, as ``x`` lists;
2. a fresh job that stops after ``stop`` batches and saves ``loader.state_dict()`` (the
   checkpoint as the reference writes it, to ``jobs/<name>.state.json``);
3. the reference itself resumed from that checkpoint: the rest of the epoch.

``jobs.json`` holds, per job, the arguments, the uninterrupted batches, the batches consumed
before the stop, and the reference's own resumed batches; ``rank_jobs`` the same per rank for
``RANK_JOBS``, run as one node of 2 ranks (two processes, torch.distributed over gloo on
127.0.0.1), the checkpoint being rank 0's. The epochs do not split evenly over
the canonical nodes (203 samples over 3, and over 64: py1s's default with
``num_canonical_nodes`` unset on one node), so the reference's padding is part of them.
"""

from __future__ import annotations

try:
    import peer  # run as a script: scripts/ is sys.path[0]
except ImportError:  # imported by the tests as scripts.<name>
    from scripts import peer

import json
import os
import shutil
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "order", "golden", "mosaic", "jobs")
NUM_SAMPLES = 203
SIZE_LIMIT = 300  # bytes per shard: 20 samples, the last shard shorter
JOBS = (
    {"name": "py1e-ncn3", "algo": "py1e", "ncn": 3, "seed": 7, "block": 50, "stop": 13},
    {"name": "py1s-default", "algo": "py1s", "ncn": None, "seed": 11, "block": None, "stop": 29},
    {"name": "py1br-ncn2", "algo": "py1br", "ncn": 2, "seed": 5, "block": 64, "stop": 7},
    {"name": "naive-ncn1", "algo": "naive", "ncn": 1, "seed": 3, "block": None, "stop": 40},
)
BATCH = 4
WORKERS = 2
# one node x 2 ranks (torch.distributed, gloo): 203 samples over 5 canonical nodes is 205
# positions, an odd count, so one rank also pads
RANK_JOBS = ({"name": "py1e-ncn5-2ranks", "algo": "py1e", "ncn": 5, "seed": 13, "block": 40,
              "stop": 9, "ranks": 2},)  # fmt: skip


def _collate(batch):
    import torch

    return torch.tensor([int(s["x"]) for s in batch])


def _loader(data: str, job: dict, cache: str | None = None):
    from streaming import StreamingDataLoader, StreamingDataset

    cache = cache or tempfile.mkdtemp(prefix="mosaic-job-")
    ds = StreamingDataset(
        remote=data, local=cache, shuffle=True, shuffle_algo=job["algo"],
        shuffle_seed=job["seed"], num_canonical_nodes=job["ncn"],
        shuffle_block_size=job["block"], batch_size=BATCH,
    )  # fmt: skip
    return StreamingDataLoader(ds, batch_size=BATCH, num_workers=WORKERS, collate_fn=_collate)


def _rank_job() -> None:
    """One rank of a RANK_JOBS job (started by _inner with the launcher's variables)."""
    import torch.distributed as dist

    job = next(j for j in RANK_JOBS if j["name"] == os.environ["GEN_JOB"])
    rank, work = int(os.environ["RANK"]), os.environ["GEN_WORK"]
    dist.init_process_group("gloo", rank=rank, world_size=job["ranks"])
    data = os.path.join(OUT, "data")
    whole = [b.tolist() for b in _loader(data, job, os.path.join(work, "whole"))]
    dist.barrier()
    loader = _loader(data, job, os.path.join(work, "stop"))
    consumed = []
    for batch in loader:
        consumed.append(batch.tolist())
        if len(consumed) == job["stop"]:
            break
    state = loader.state_dict()
    del loader
    dist.barrier()
    resumed_loader = _loader(data, job, os.path.join(work, "resume"))
    resumed_loader.load_state_dict(state)
    resumed = [b.tolist() for b in resumed_loader]
    dist.barrier()
    with open(os.path.join(work, f"rank{rank}.json"), "w") as f:
        json.dump({"whole": whole, "consumed": consumed, "resumed": resumed, "state": state}, f)
    dist.destroy_process_group()


def _rank_jobs() -> list[dict]:
    import subprocess

    out = []
    for job in RANK_JOBS:
        work = tempfile.mkdtemp(prefix="mosaic-ranks-")
        procs = []
        for rank in range(job["ranks"]):
            env = dict(
                os.environ, GEN_JOB=job["name"], GEN_WORK=work, RANK=str(rank),
                LOCAL_RANK=str(rank), WORLD_SIZE=str(job["ranks"]),
                LOCAL_WORLD_SIZE=str(job["ranks"]), MASTER_ADDR="127.0.0.1", MASTER_PORT="29517",
            )  # fmt: skip
            procs.append(
                subprocess.Popen([sys.executable, os.path.abspath(__file__), "--inner"], env=env)
            )
        if any(p.wait(timeout=300) for p in procs):
            raise RuntimeError(f"a rank of {job['name']} failed")
        ranks = []
        for rank in range(job["ranks"]):
            with open(os.path.join(work, f"rank{rank}.json")) as f:
                ranks.append(json.load(f))
        state = ranks[0]["state"]
        with open(os.path.join(OUT, f"{job['name']}.state.json"), "w") as f:
            json.dump(state, f, indent=1, sort_keys=True)
            f.write("\n")
        shutil.rmtree(work, ignore_errors=True)
        out.append(dict(job, ranks_out=ranks, state=state))
    return out


def _inner() -> None:
    import warnings

    if os.environ.get("GEN_JOB"):
        _rank_job()
        return

    from streaming import MDSWriter
    from streaming.base.util import clean_stale_shared_memory

    warnings.simplefilter("ignore")
    data = os.path.join(OUT, "data")
    shutil.rmtree(data, ignore_errors=True)
    with MDSWriter(out=data, columns={"x": "int"}, size_limit=SIZE_LIMIT) as w:
        for i in range(NUM_SAMPLES):
            w.write({"x": i})
    out = []
    for job in JOBS:
        clean_stale_shared_memory()
        whole = [b.tolist() for b in _loader(data, job)]
        clean_stale_shared_memory()
        loader = _loader(data, job)
        consumed = []
        for batch in loader:
            consumed.append(batch.tolist())
            if len(consumed) == job["stop"]:
                break
        state = loader.state_dict()
        del loader
        with open(os.path.join(OUT, f"{job['name']}.state.json"), "w") as f:
            json.dump(state, f, indent=1, sort_keys=True)
            f.write("\n")
        clean_stale_shared_memory()
        resumed_loader = _loader(data, job)
        resumed_loader.load_state_dict(state)
        resumed = [b.tolist() for b in resumed_loader]
        out.append(
            dict(job, whole=whole, consumed=consumed, reference_resumed=resumed, state=state)
        )
    meta = {"reference": "mosaicml-streaming 0.13.0", "batch": BATCH, "workers": WORKERS,
            "jobs": out, "rank_jobs": _rank_jobs()}  # fmt: skip
    with open(os.path.join(OUT, "jobs.json"), "w") as f:
        json.dump(meta, f)
        f.write("\n")


def main() -> int:
    return peer.main(__file__, __doc__, _inner)


if __name__ == "__main__":
    sys.exit(main())
