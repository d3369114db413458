#!/usr/bin/env python
"""Differential run against the reference: random dataset configurations, astream beside
mosaicml-streaming 0.13.0, sample for sample.

Usage:  python scripts/diff_reference.py [--cases 100] [--seed 1]
        [--modes iter,loader,resume,dlresume]
        [--peer-python .bench/peers-venv/bin/python] [--keep DIR]

It writes three small MDS streams (97, 53 and 211 samples, shards of 4-40 samples) with
astream's writer, draws ``--cases`` configurations from ``random.Random(--seed)`` -- one to
three streams weighed by ``proportion``, ``repeat``, ``choose`` or not at all, with or without
``epoch_size``; every reference shuffle algorithm, shuffled or not; ``shuffle_seed``,
``shuffle_block_size`` and ``num_canonical_nodes`` set or left to their defaults;
``batch_size``, ``sampling_method``, ``sampling_granularity``, ``partition_algo`` and every
``batching_method`` -- and runs each in both libraries, each in its own process (astream in
this python, the reference in ``--peer-python``, the harness's peers venv), then compares:

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

A configuration that one library refuses must be refused by the other, except ``KNOWN``: the
reference's own refusals that astream does not repeat (docs/migrating.md says why), counted
apart. ``len()`` and the extra keys of astream's ``state_dict`` are not compared: both differ
by design (docs/migrating.md). Prints every divergence with its configuration and exits 1 if
there is one. Not part of CI (it needs the reference installed); the golden tests under
tests/order are what CI runs, and ``tests/order/test_reference_mixing.py`` came from this run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from typing import Any

try:  # run as a script: scripts/ is sys.path[0]
    from gen_mosaic_attrs_golden import ARRAYS, COUNTS, SETTINGS
except ImportError:  # imported as scripts.diff_reference
    from scripts.gen_mosaic_attrs_golden import ARRAYS, COUNTS, SETTINGS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STREAMS = {"a": (97, 700), "b": (53, 1500), "c": (211, 400)}  # samples, size_limit
ALGOS = ("py1e", "py1br", "py1s", "py2s", "naive")
# the reference's refusals astream does not repeat: a checkpoint taken inside the padding its
# canonical nodes add to the epoch (it compares against the unpadded epoch size) resumes
KNOWN = ("Resuming further into the dataset",)  # also inside a DataLoader worker's error
CHUNK = 20  # configurations per process
# the ``attrs`` mode: the reference's attributes after an iteration (``predownload`` is left
# out: unset, astream's may be more, docs/migrating.md; these configurations never set it)
ATTRS = tuple(n for n in SETTINGS if n != "predownload") + ARRAYS + COUNTS


def configs(n: int, seed: int, data: str) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        names = rng.sample(sorted(STREAMS), rng.choice([1, 2, 3]))
        kinds = ["none", "repeat", "choose"] + (["proportion"] if len(names) > 1 else [])
        kind = rng.choice(kinds)
        streams = []
        for name in names:
            s: dict[str, Any] = {"local": os.path.join(data, name)}
            if kind == "proportion":
                s["proportion"] = rng.choice([0.2, 0.5, 1.0, 1.5])
            elif kind == "repeat":
                s["repeat"] = rng.choice([0.5, 1, 1.3, 2])
            elif kind == "choose":
                s["choose"] = rng.choice([10, 50, 120])
            streams.append(s)
        cfg: dict[str, Any] = {
            "streams": streams,
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
        out.append(cfg)
    return out


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


def inner(lib: str, path: str, modes: list[str]) -> None:
    """Run every configuration of ``path`` in this process with ``lib``; write the results."""
    import gc
    import warnings

    warnings.simplefilter("ignore")
    if lib == "reference":
        from streaming import Stream, StreamingDataLoader, StreamingDataset
    else:
        from astream import Stream, StreamingDataLoader, StreamingDataset
    from torch.utils.data import DataLoader

    with open(path) as f:
        table = json.load(f)
    results = []
    for cfg in table:
        kw = {k: v for k, v in cfg.items() if not k.startswith("_") and k != "streams"}
        kw = {k: v for k, v in kw.items() if v is not None}

        def build(cfg: dict[str, Any] = cfg, kw: dict[str, Any] = kw) -> Any:
            return StreamingDataset(streams=[Stream(**s) for s in cfg["streams"]], **kw)

        got: dict[str, Any] = {}
        for mode in modes:
            try:
                if mode == "iter":
                    ds = build()
                    got[mode] = [_ids(list(ds)) for _ in range(2)]
                elif mode == "attrs":
                    ds = build()
                    for _ in ds:  # the reference fills some in at its first iteration
                        pass
                    got[mode] = {n: _plain(getattr(ds, n)) for n in ATTRS}
                elif mode == "loader":
                    ds = build()
                    dl = DataLoader(
                        ds,
                        batch_size=kw["batch_size"],
                        num_workers=cfg["_workers"],
                        collate_fn=_ids,
                        drop_last=cfg["_drop_last"],
                    )
                    got[mode] = [list(dl) for _ in range(2)]
                    del dl
                elif mode == "dlresume":
                    ds = build()

                    def loader(d: Any, bs: int = kw["batch_size"], w: int = cfg["_workers"]) -> Any:
                        return StreamingDataLoader(
                            d, batch_size=bs, num_workers=w, collate_fn=_column
                        )

                    first = loader(ds)
                    it = iter(first)
                    total = len(list(loader(build())))
                    taken = [next(it)["id"] for _ in range(int(cfg["_resume_at"] * total))]
                    state = first.state_dict()
                    del it, first
                    again = loader(build())
                    again.load_state_dict(state)
                    got[mode] = [taken, [b["id"] for b in again], [b["id"] for b in again]]
                    del again
                else:
                    ds = build()
                    n = int(cfg["_resume_at"] * len(_ids(list(ds))))
                    state = ds.state_dict(n, True)
                    again = build()
                    again.load_state_dict(state)
                    keys = ("epoch", "sample_in_epoch", "num_canonical_nodes", "shuffle_seed")
                    got[mode] = [
                        n,
                        {k: int(state[k]) for k in keys},
                        _ids(list(again)),
                        _ids(list(again)),
                    ]
                    del again
                del ds
            except Exception as exc:
                text = f"{type(exc).__name__}: {exc}"  # a worker's error ends with its own
                got[mode] = {
                    "error": text if len(text) < 400 else f"{text[:150]} ... {text[-250:]}"
                }
            gc.collect()
        results.append(got)
    with open(f"{path}.{lib}.json", "w") as f:
        json.dump(results, f)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--modes", default="iter,loader,resume,dlresume")
    ap.add_argument(
        "--peer-python", default=os.path.join(ROOT, ".bench", "peers-venv", "bin", "python")
    )
    ap.add_argument("--keep", help="write the data, table and results here (kept)")
    ap.add_argument("--inner", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    modes = a.modes.split(",")
    if a.inner:
        inner(a.inner[0], a.inner[1], modes)
        return 0
    # the configurations run with the work directory as cwd: a relative path must still hold
    a.peer_python = os.path.abspath(a.peer_python)
    if not os.path.exists(a.peer_python):
        print(f"no reference python at {a.peer_python}: pass --peer-python", file=sys.stderr)
        return 2
    from astream import MDSWriter

    work = a.keep or tempfile.mkdtemp(prefix="astream-diff-")
    data = os.path.join(work, "data")
    for k, (name, (n, limit)) in enumerate(sorted(STREAMS.items())):
        out = os.path.join(data, name)
        if os.path.exists(os.path.join(out, "index.json")):
            continue
        with MDSWriter(out=out, columns={"id": "int", "pad": "bytes"}, size_limit=limit) as w:
            for i in range(n):
                w.write({"id": 1000 * k + i, "pad": b"x" * (i % 37)})
    table = configs(a.cases, a.seed, data)
    env = dict(os.environ, PYTHONPATH=ROOT)
    ours: list[Any] = []
    theirs: list[Any] = []
    # a fresh process per CHUNK configurations: the reference's loaders leave descriptors open
    # (a hundred configurations in all four modes pass even a limit of 20,000)
    for c in range(0, len(table), CHUNK):
        path = os.path.join(work, f"cases-{c:05d}.json")
        with open(path, "w") as f:
            json.dump(table[c : c + CHUNK], f)
        for lib, python, into in (
            ("astream", sys.executable, ours),
            ("reference", a.peer_python, theirs),
        ):
            cmd = [python, os.path.abspath(__file__), "--modes", a.modes, "--inner", lib, path]
            subprocess.run(cmd, check=True, env=env, cwd=work)
            with open(f"{path}.{lib}.json") as f:
                into += json.load(f)
    diverged = refused = known = 0
    for k, (cfg, x, y) in enumerate(zip(table, ours, theirs)):
        for mode in modes:
            a_got, r_got = x[mode], y[mode]
            a_err = isinstance(a_got, dict) and set(a_got) == {"error"}
            r_err = isinstance(r_got, dict) and set(r_got) == {"error"}
            if a_err and r_err:
                refused += 1
                continue
            if r_err and not a_err and any(m in r_got["error"] for m in KNOWN):
                known += 1
                continue
            if a_err != r_err or a_got != r_got:
                diverged += 1
                what = a_got["error"] if a_err else (r_got["error"] if r_err else "other samples")
                print(f"case {k} {mode}: {what}\n    {json.dumps(cfg)}")
    checked = len(table) * len(modes)
    print(
        f"{checked} checks ({len(table)} configurations x {', '.join(modes)}): "
        f"{diverged} diverged, {refused} refused by both, {known} refused by the reference "
        f"only as documented; data and results in {work}"
    )
    return 1 if diverged else 0


if __name__ == "__main__":
    raise SystemExit(main())
