#!/usr/bin/env python
"""Differential run against the reference: random dataset configurations, astream beside
mosaicml-streaming 0.13.0, sample for sample.

Usage:  python scripts/diff_reference.py [--cases 100] [--seed S]
        [--modes iter,loader,resume,dlresume] [--worlds 0.2]
        [--peer-python .venv-ref/bin/python] [--keep DIR]

It writes three small MDS streams (97, 53 and 211 samples, shards of 4-40 samples) with
astream's writer, draws ``--cases`` configurations from ``random.Random(--seed)`` -- one to
three streams weighed by ``proportion``, ``repeat``, ``choose`` or not at all, with or without
``epoch_size``; every reference shuffle algorithm, shuffled or not; ``shuffle_seed``,
``shuffle_block_size`` and ``num_canonical_nodes`` set or left to their defaults;
``batch_size``, ``sampling_method``, ``sampling_granularity``, ``partition_algo`` and every
``batching_method`` -- and runs each in both libraries, each in its own process (astream in
this python, the reference in ``--peer-python``), then compares:

- ``iter``: the ids one process yields over two iterations (epochs 0 and 1);
- ``loader``: the ids a plain torch ``DataLoader`` yields batch by batch over two epochs, with
  1-3 workers and ``drop_last`` drawn too;
- ``resume``: ``state_dict(n, True)`` after a drawn ``n`` of epoch 0, loaded into a new
  dataset: the rest of epoch 0 and all of epoch 1, and the state's reference keys;
- ``dlresume``: a ``StreamingDataLoader`` (1-3 workers) stopped after a drawn number of
  batches, its ``state_dict()`` loaded into a new dataset's loader: the batches of the rest of
  epoch 0 and of epoch 1.
- ``attrs`` (not in the default ``--modes``): the reference's attributes (``ATTRS``: the
  settings as resolved and the index's arrays) after one iteration.

The first configurations are always the same three: one stream at the default arguments
(which do not shuffle), two streams shuffled with every other argument at its default (the
default shuffle algorithm and canonical nodes), and a drawn configuration with
``shuffle=False`` (all three on 2 ranks with ``--worlds 1``). A share ``--worlds`` of the
others runs on a World of one node of 2 ranks: one process per rank with torchrun's variables
and one gloo process group per rank process, as a trainer has; ``iter`` and ``resume`` per
rank, every rank resuming at the same point. Two things used to hang such a World, both
handled here: the reference made a process group per dataset (a new rendezvous port each), so
a rank that raised in one mode and not the other left the two waiting on different ports; and
the reference's local leader computes the partition alone while the other ranks wait in its
shared-memory barrier, which has no timeout, so a configuration it refuses at iteration left
them there forever (``_release_on_refusal``). The reference's file locks go to the run's own
temp directory; a World still running after ``RANK_TIMEOUT_S`` has every thread's stack
printed, is killed, its leftover shared memory removed, and is reported. (Two nodes of one
rank each on one machine hang the reference's rank 0, so that shape is not drawn.)

Without ``--seed`` each run draws a new seed, printed first and again with any divergence, so
a failure reruns with ``--seed S --cases N --worlds W``. A configuration that one library
refuses must be refused by the other, except ``KNOWN``: the reference's own refusals that
astream does not repeat (docs/migrating.md says why), counted apart. ``len()`` and the extra
keys of astream's ``state_dict`` are not compared: both differ by design (docs/migrating.md).
Prints every divergence with its configuration and exits 1 if there is one. The reference's
venv is made by ``scripts/setup.sh`` (``.venv-ref``); ``tests/order/test_diff_reference.py``
runs 40 configurations in CI, and 20 on 2-rank Worlds.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

try:  # run as a script: scripts/ is sys.path[0]
    import peer
    from gen_mosaic_attrs_golden import ARRAYS, COUNTS, SETTINGS
except ImportError:  # imported as scripts.diff_reference
    from scripts import peer
    from scripts.gen_mosaic_attrs_golden import ARRAYS, COUNTS, SETTINGS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STREAMS = {"a": (97, 700), "b": (53, 1500), "c": (211, 400)}  # samples, size_limit
ALGOS = ("py1e", "py1br", "py1s", "py2s", "naive")
# (nodes, ranks per node) of the multi-rank configurations
WORLDS = ((1, 2),)
WORLD_MODES = ("iter", "resume")
# the reference's refusals astream does not repeat: a checkpoint taken inside the padding its
# canonical nodes add to the epoch (it compares against the unpadded epoch size) resumes
KNOWN = ("Resuming further into the dataset",)  # also inside a DataLoader worker's error
CHUNK = 20  # configurations per process
RANK_TIMEOUT_S = 120  # a World's processes: a refusal on one rank only leaves the other waiting
SHM = "/dev/shm"
WORLD_COLLECTIVE_S = 60  # a rank alone at a collective (the other raised) raises after this
# the ``attrs`` mode: the reference's attributes after an iteration (``predownload`` is left
# out: unset, astream's may be more, docs/migrating.md; these configurations never set it)
ATTRS = tuple(n for n in SETTINGS if n != "predownload") + ARRAYS + COUNTS
REFERENCE_PYTHONS = (
    os.path.join(ROOT, ".venv-ref", "bin", "python"),
    os.path.join(ROOT, ".bench", "peers-venv", "bin", "python"),
)


def _streams(rng: random.Random, data: str, kind: str, names: list[str]) -> list[dict]:
    out = []
    for name in names:
        s: dict[str, Any] = {"local": os.path.join(data, name)}
        if kind == "proportion":
            s["proportion"] = rng.choice([0.2, 0.5, 1.0, 1.5])
        elif kind == "repeat":
            s["repeat"] = rng.choice([0.5, 1, 1.3, 2])
        elif kind == "choose":
            s["choose"] = rng.choice([10, 50, 120])
        out.append(s)
    return out


def draw(rng: random.Random, data: str, worlds: float = 0.0) -> dict[str, Any]:
    """One random configuration; its ``_``-keys are the harness's (workers, drop_last, where
    to resume, the World), the others ``StreamingDataset`` arguments (``None``: left unset)."""
    names = rng.sample(sorted(STREAMS), rng.choice([1, 2, 3]))
    kind = rng.choice(["none", "repeat", "choose"] + (["proportion"] if len(names) > 1 else []))
    cfg: dict[str, Any] = {
        "streams": _streams(rng, data, kind, names),
        "shuffle": rng.random() < 0.8,
        "shuffle_algo": rng.choice(ALGOS),
        "shuffle_seed": rng.randrange(10_000),
        "shuffle_block_size": rng.choice([None, 16, 50, 300]),
        "num_canonical_nodes": rng.choice([None, 1, 2, 3, 8]),
        "batch_size": rng.choice([1, 4, 7, 16]),
        "sampling_method": rng.choice(["balanced", "fixed"]),
        "sampling_granularity": rng.choice([1, 1, 3]),
        "partition_algo": rng.choice(["relaxed", "orig"]),
        "batching_method": rng.choice(
            ["random", "random", "stratified", "per_stream", "device_per_stream"]
        ),
    }
    if kind == "proportion" and rng.random() < 0.6:
        cfg["epoch_size"] = rng.choice([100, 257, "0.3k"])
    elif kind == "none" and rng.random() < 0.3:
        cfg["epoch_size"] = rng.choice([90, 400])
    cfg["_workers"] = rng.choice([1, 2, 3])
    cfg["_drop_last"] = rng.random() < 0.3
    cfg["_resume_at"] = rng.random()
    cfg["_world"] = list(rng.choice(WORLDS)) if rng.random() < worlds else [1, 1]
    return cfg


def configs(n: int, seed: int, data: str, worlds: float = 0.0) -> list[dict[str, Any]]:
    """``n`` configurations: the three fixed ones (module docstring), then drawn ones."""
    rng = random.Random(seed)
    fixed_world = list(WORLDS[0]) if worlds >= 1 else [1, 1]  # every one on 2 ranks
    harness = {"_workers": 2, "_drop_last": False, "_resume_at": 0.4, "_world": fixed_world}
    at_defaults = {"streams": [{"local": os.path.join(data, "a")}], "batch_size": 4, **harness}
    shuffled = {
        "streams": [{"local": os.path.join(data, name)} for name in ("a", "c")],
        "shuffle": True,
        "batch_size": 8,
        **harness,
    }
    unshuffled = {**draw(rng, data, worlds), "shuffle": False}
    out = [at_defaults, shuffled, unshuffled]
    out += [draw(rng, data, worlds) for _ in range(max(0, n - len(out)))]
    return out[:n]


def _plain(v: Any) -> Any:
    import numpy as np

    if isinstance(v, np.ndarray):
        return [int(x) for x in v.tolist()]
    return int(v) if isinstance(v, (np.integer, np.bool_)) else v


def _ids(batch: list[dict[str, Any]]) -> list[int]:
    return [int(s["id"]) for s in batch]


def _column(batch: list[dict[str, Any]]) -> dict[str, list[int]]:
    """A batch as the reference's StreamingDataLoader counts it (the length of a column)."""
    return {"id": _ids(batch)}


def run_mode(mode: str, cfg: dict[str, Any], build: Any, lib: Any, ranks: int) -> Any:
    """What ``mode`` observes of ``cfg`` (``build()`` makes its dataset, ``lib`` is the
    library's module); ``ranks`` scales a resume point to the World's global samples."""
    from torch.utils.data import DataLoader

    bs = cfg["batch_size"]
    if mode == "iter":
        ds = build()
        return [_ids(list(ds)) for _ in range(2)]
    if mode == "attrs":
        ds = build()
        for _ in ds:  # the reference fills some in at its first iteration
            pass
        return {n: _plain(getattr(ds, n)) for n in ATTRS}
    if mode == "loader":
        ds = build()
        dl = DataLoader(
            ds, batch_size=bs, num_workers=cfg["_workers"], collate_fn=_ids,
            drop_last=cfg["_drop_last"],
        )  # fmt: skip
        return [list(dl) for _ in range(2)]
    if mode == "dlresume":

        def loader(d: Any) -> Any:
            return lib.StreamingDataLoader(
                d, batch_size=bs, num_workers=cfg["_workers"], collate_fn=_column
            )

        first = loader(build())
        it = iter(first)
        total = len(list(loader(build())))
        taken = [next(it)["id"] for _ in range(int(cfg["_resume_at"] * total))]
        state = first.state_dict()
        del it, first
        again = loader(build())
        again.load_state_dict(state)
        return [taken, [b["id"] for b in again], [b["id"] for b in again]]
    ds = build()  # resume
    n = int(cfg["_resume_at"] * _fewest(len(_ids(list(ds))), ranks)) * ranks
    state = ds.state_dict(n, True)
    again = build()
    again.load_state_dict(state)
    keys = ("epoch", "sample_in_epoch", "num_canonical_nodes", "shuffle_seed")
    return [n, {k: int(state[k]) for k in keys}, _ids(list(again)), _ids(list(again))]


def _fewest(mine: int, ranks: int) -> int:
    """The smallest of the ranks' ``mine``: one resume point for the whole World (its ranks
    share one checkpoint, and the reference one resume slot per node in shared memory)."""
    if ranks == 1:
        return mine
    import torch
    import torch.distributed as dist

    t = torch.tensor([mine], dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return int(t.item())


def _join_world(rank: int, ranks: int) -> None:
    """One process group for the life of this rank's process, as a trainer started by
    torchrun has, with a bounded timeout: the reference then never makes a group of its own
    (one per dataset, each on a new port, which two ranks out of step wait on forever) and a
    rank left alone at one of its collectives raises instead of waiting."""
    import datetime

    import torch.distributed as dist

    timeout = datetime.timedelta(seconds=WORLD_COLLECTIVE_S)
    dist.init_process_group("gloo", rank=rank, world_size=ranks, timeout=timeout)


def _release_on_refusal() -> None:
    """Work around the reference's hang on a refusal: its local leader computes the epoch's
    partition alone while the node's other ranks wait in its shared-memory barrier, which has
    no timeout; a leader that raises there (a configuration the reference refuses at
    iteration) leaves them waiting forever. The wrapper enters that barrier once before the
    error propagates, so the other ranks go on, find no partition in shared memory and raise
    too: the refusal is seen on every rank, as on one."""
    import streaming.base.dataset as sd

    generate = sd.generate_work

    def guarded(*args: Any) -> Any:
        try:
            return generate(*args)
        except Exception:
            ds = args[1]
            ds._shared_barrier(ds._unique_worker_world.workers_per_node)
            raise

    sd.generate_work = guarded


def inner(lib: str, path: str, modes: list[str]) -> None:
    """Run every configuration of ``path`` in this process with ``lib``; write the results.
    Under torchrun's variables (a World's rank) it writes ``<path>.<lib>.r<rank>.json``."""
    import faulthandler
    import gc
    import importlib
    import signal
    import warnings

    faulthandler.register(signal.SIGUSR1, all_threads=True)  # a hung rank's stacks, on demand
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)  # both libraries' logged warnings (dropped batches...)
    mod = importlib.import_module("streaming" if lib == "reference" else "astream")
    rank, ranks = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if ranks > 1:
        _join_world(rank, ranks)
        if lib == "reference":
            _release_on_refusal()
    with open(path) as f:
        table = json.load(f)
    results = []
    for cfg in table:
        kw = {k: v for k, v in cfg.items() if not k.startswith("_") and k != "streams"}
        kw = {k: v for k, v in kw.items() if v is not None}

        def build(streams: list[dict] = cfg["streams"], kw: dict[str, Any] = kw) -> Any:
            return mod.StreamingDataset(streams=[mod.Stream(**s) for s in streams], **kw)

        got: dict[str, Any] = {}
        for mode in modes:
            try:
                got[mode] = run_mode(mode, cfg, build, mod, ranks)
            except Exception as exc:
                text = f"{type(exc).__name__}: {exc}"  # a worker's error ends with its own
                got[mode] = {
                    "error": text if len(text) < 400 else f"{text[:150]} ... {text[-250:]}"
                }
            gc.collect()
        results.append(got)
    out = f"{path}.{lib}.json" if ranks == 1 else f"{path}.{lib}.r{rank}.json"
    with open(out, "w") as f:
        json.dump(results, f)


def write_data(data: str) -> None:
    """The three streams under ``data``."""
    from astream import MDSWriter

    for k, (name, (n, limit)) in enumerate(sorted(STREAMS.items())):
        out = os.path.join(data, name)
        if not os.path.exists(os.path.join(out, "index.json")):
            with MDSWriter(out=out, columns={"id": "int", "pad": "bytes"}, size_limit=limit) as w:
                for i in range(n):
                    w.write({"id": 1000 * k + i, "pad": b"x" * (i % 37)})


def _reference_shm() -> set[str]:
    """The reference's shared memory objects now in /dev/shm (``<6-digit prefix>_<name>``)."""
    names = os.listdir(SHM) if os.path.isdir(SHM) else []
    return {n for n in names if len(n) > 7 and n[:6].isdigit() and n[6] == "_"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_world(
    cmd: list[str], env: dict[str, str], work: str, world: list[int], path: str, lib: str
) -> list[Any]:
    """Run ``cmd`` as every rank of ``world`` (nodes, ranks per node) at once; per
    configuration, each mode's per-rank results, or the first rank's error."""
    nodes, per_node = world
    ranks = nodes * per_node
    base = dict(env, WORLD_SIZE=str(ranks), LOCAL_WORLD_SIZE=str(per_node))
    base.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    shm_before = _reference_shm()
    procs = []
    for r in range(ranks):
        rank_env = dict(base, RANK=str(r), LOCAL_RANK=str(r % per_node))
        procs.append(
            subprocess.Popen(cmd, cwd=work, env=dict(rank_env, NODE_RANK=str(r // per_node)))
        )
    try:
        for p in procs:
            p.wait(timeout=RANK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        hung = [p for p in procs if p.poll() is None]
        print(f"World {world} of {lib}: ranks {[procs.index(p) for p in hung]} hung; stacks:")
        for p in hung:
            p.send_signal(signal.SIGUSR1)  # faulthandler prints every thread's stack
        time.sleep(2)
        for p in procs:
            p.kill()
            p.wait()
        for name in _reference_shm() - shm_before:  # what the killed ranks could not unlink
            os.unlink(os.path.join(SHM, name))
    per_rank = []
    for r, p in enumerate(procs):
        if p.returncode != 0:
            return [None]  # the caller records the World's failure
        with open(f"{path}.{lib}.r{r}.json") as f:
            per_rank.append(json.load(f))
    merged = []
    for rows in zip(*per_rank):
        got = {}
        for mode in rows[0]:
            errs = [row[mode] for row in rows if isinstance(row[mode], dict)]
            got[mode] = errs[0] if errs else [row[mode] for row in rows]
        merged.append(got)
    return merged


def run_chunk(
    table: list[dict[str, Any]], c: int, work: str, modes: list[str], peer_python: str
) -> tuple[list[Any], list[Any]]:
    """Run configurations ``table[c:c + CHUNK]`` in both libraries: the one-process ones in
    one process per library, each World's in one process per rank. Results in table order."""
    stubs = os.path.join(work, "stubs")
    # the reference's file locks (two per dataset, never deleted) go to the run's own temp
    # directory: every dataset it builds walks the prefixes whose locks exist, in /tmp
    # thousands after a few runs
    tmp = os.path.join(work, "tmp")
    os.makedirs(tmp, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([stubs, ROOT]), TMPDIR=tmp)
    chunk = list(enumerate(table[c : c + CHUNK]))
    groups: dict[tuple[int, int], list[int]] = {}
    for i, cfg in chunk:
        groups.setdefault(tuple(cfg["_world"]), []).append(i)
    out: dict[str, dict[int, Any]] = {"astream": {}, "reference": {}}
    for world, idx in sorted(groups.items()):
        path = os.path.join(work, f"cases-{c:05d}-{world[0]}x{world[1]}.json")
        with open(path, "w") as f:
            json.dump([table[c + i] for i in idx], f)
        wmodes = modes if world == (1, 1) else [m for m in modes if m in WORLD_MODES]
        for lib, python in (("astream", sys.executable), ("reference", peer_python)):
            cmd = [python, os.path.abspath(__file__), "--modes", ",".join(wmodes)]
            cmd += ["--inner", lib, path]
            if world == (1, 1):
                subprocess.run(cmd, check=True, env=env, cwd=work)
                with open(f"{path}.{lib}.json") as f:
                    rows = json.load(f)
            else:
                rows = _run_world(cmd, env, work, list(world), path, lib)
                if rows == [None]:
                    failed = {"error": f"a rank of World {world} failed or hung (see above)"}
                    rows = [{m: failed for m in wmodes} for _ in idx]
            out[lib].update(zip(idx, rows))
    return [out["astream"][i] for i, _ in chunk], [out["reference"][i] for i, _ in chunk]


def compare(table: list[dict[str, Any]], ours: list[Any], theirs: list[Any]) -> dict[str, int]:
    """Print each divergence; the counts of checks, divergences and refusals."""
    n = {"checks": 0, "diverged": 0, "refused": 0, "known": 0}
    for k, (cfg, x, y) in enumerate(zip(table, ours, theirs)):
        for mode in x:
            n["checks"] += 1
            a_got, r_got = x[mode], y[mode]
            a_err = isinstance(a_got, dict) and set(a_got) == {"error"}
            r_err = isinstance(r_got, dict) and set(r_got) == {"error"}
            if a_err and r_err:
                n["refused"] += 1
                continue
            if r_err and not a_err and any(m in r_got["error"] for m in KNOWN):
                n["known"] += 1
                continue
            if a_err != r_err or a_got != r_got:
                n["diverged"] += 1
                what = a_got["error"] if a_err else (r_got["error"] if r_err else "other samples")
                print(f"case {k} {mode}: {what}\n    {json.dumps(cfg)}")
    return n


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=100)
    ap.add_argument("--seed", type=int, help="a new one each run when left out (printed)")
    ap.add_argument("--modes", default="iter,loader,resume,dlresume")
    ap.add_argument("--worlds", type=float, default=0.2, help="share of 2-rank Worlds")
    default = next((p for p in REFERENCE_PYTHONS if os.path.exists(p)), REFERENCE_PYTHONS[0])
    ap.add_argument("--peer-python", default=default, help="python of mosaicml-streaming 0.13.0")
    ap.add_argument("--keep", help="write the data, table and results here (kept)")
    ap.add_argument("--inner", nargs=2, help=argparse.SUPPRESS)
    return ap.parse_args()


def main() -> int:
    a = _args()
    modes = a.modes.split(",")
    if a.inner:
        inner(a.inner[0], a.inner[1], modes)
        return 0
    # the configurations run with the work directory as cwd: a relative path must still hold
    a.peer_python = os.path.abspath(a.peer_python)
    if not os.path.exists(a.peer_python):
        print(f"no reference python at {a.peer_python}: run scripts/setup.sh", file=sys.stderr)
        return 2
    seed = a.seed if a.seed is not None else random.SystemRandom().randrange(2**31)
    rerun = (
        f"python scripts/diff_reference.py --seed {seed} --cases {a.cases} --modes {a.modes} "
        f"--worlds {a.worlds}"
    )
    print(f"seed {seed}", flush=True)
    work = a.keep or tempfile.mkdtemp(prefix="astream-diff-")
    write_data(os.path.join(work, "data"))
    for rel, text in peer.STUBS.items():  # torchvision, which `import streaming` needs
        os.makedirs(os.path.dirname(os.path.join(work, "stubs", rel)), exist_ok=True)
        with open(os.path.join(work, "stubs", rel), "w") as f:
            f.write(text)
    table = configs(a.cases, seed, os.path.join(work, "data"), a.worlds)
    ours: list[Any] = []
    theirs: list[Any] = []
    # a fresh process per CHUNK configurations: the reference's loaders leave descriptors open
    # (a hundred configurations in all four modes pass even a limit of 20,000)
    for c in range(0, len(table), CHUNK):
        x, y = run_chunk(table, c, work, modes, a.peer_python)
        ours += x
        theirs += y
    n = compare(table, ours, theirs)
    print(
        f"{n['checks']} checks ({len(table)} configurations, modes {a.modes}; "
        f"{sum(c['_world'] != [1, 1] for c in table)} on 2 ranks): {n['diverged']} diverged, "
        f"{n['refused']} refused by both, {n['known']} refused by the reference only as "
        f"documented; data and results in {work}"
    )
    if n["diverged"]:
        print(f"seed {seed}: rerun with  {rerun}")
    return 1 if n["diverged"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
