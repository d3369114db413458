#!/usr/bin/env python
"""Regenerate tests/engine/golden/mosaic_warnings.json from the reference (mosaicml-streaming
0.13.0): the warnings it gives, at construction and iteration, for the inputs of ``CASES``.

Usage:  python scripts/gen_mosaic_warnings_golden.py [--peer-python .venv-ref/bin/python]

Each case is a function of the library's top module and a directory holding two datasets
written by that library (``a``: 10 samples ``{"x": i}`` in shards of 5; ``b``: 20 samples in
shards of 5). The reference warns two ways: ``warnings.warn`` (recorded with its category) and
its loggers' ``warning`` (recorded as kind ``log``). Per warning the golden keeps its kind, its
category and its facts (``facts``: the numbers and setting names in the message, the data
directory left out), which astream's message must carry too, in any wording. Cases where the
reference is silent are recorded with no warning: astream must be silent there as well.
``RANK_CASES`` run on a World of one node of 2 ranks (a process per rank, a gloo group each),
recorded per rank.
``tests/engine/test_reference_warnings.py`` runs the same functions with astream.
"""

from __future__ import annotations

try:
    import peer  # run as a script: scripts/ is sys.path[0]
except ImportError:  # imported by the tests as scripts.<name>, for its cases
    from scripts import peer

import logging
import os
import re
import warnings
from collections.abc import Callable
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "engine", "golden", "mosaic_warnings.json")
# setting and method names that are facts when a message names them
WORDS = (
    "predownload", "batch_size", "shuffle_block_size", "num_canonical_nodes", "exist_ok",
    "replication", "stratified", "per_stream", "device_per_stream", "py1e",
)  # fmt: skip


def write(m: Any, d: str) -> None:
    """The two datasets of every case, with ``m``'s writer (shards of 5 samples)."""
    for name, n in (("a", 10), ("b", 20)):
        with m.MDSWriter(out=os.path.join(d, name), columns={"x": "int"}, size_limit=232) as w:
            for i in range(n):
                w.write({"x": 100 * (name == "b") + i})


def _ds(m: Any, d: str, **kw: Any) -> Any:
    kw.setdefault("batch_size", 2)
    return m.StreamingDataset(local=os.path.join(d, "a"), **kw)


def _mix(m: Any, d: str, **kw: Any) -> Any:
    kw.setdefault("batch_size", 2)
    streams = [m.Stream(local=os.path.join(d, n)) for n in ("a", "b")]
    return m.StreamingDataset(streams=streams, **kw)


def _epochs(ds: Any, n: int = 1) -> None:
    for _ in range(n):
        for _ in ds:
            pass


def _resume(m: Any, d: str, at: int, **kw: Any) -> None:
    """A checkpoint after ``at`` samples of epoch 0, loaded by a new dataset, iterated."""
    first = _mix(m, d, **kw)
    _epochs(first)
    state = first.state_dict(at, True)
    again = _mix(m, d, **kw)
    again.load_state_dict(state)
    _epochs(again)


def _before_training(m: Any, d: str) -> None:
    """A checkpoint of a dataset that never iterated, loaded by a new one, iterated."""
    state = _ds(m, d).state_dict(0, False)
    again = _ds(m, d)
    again.load_state_dict(state)
    _epochs(again)


def _writer(m: Any, d: str, out: str, **kw: Any) -> None:
    with m.MDSWriter(out=os.path.join(d, out), columns={"x": "int"}, **kw) as w:
        w.write({"x": 1})


def _loader(m: Any, d: str) -> None:
    for _ in m.StreamingDataLoader(_ds(m, d), batch_size=2, num_workers=0):
        pass


CASES: dict[str, Callable[[Any, str], Any]] = {
    # silent at the defaults
    "defaults": lambda m, d: _epochs(_ds(m, d), 2),
    "defaults_shuffled": lambda m, d: _epochs(_ds(m, d, shuffle=True), 2),
    "defaults_two_streams": lambda m, d: _epochs(_mix(m, d), 2),
    "defaults_two_streams_shuffled": lambda m, d: _epochs(_mix(m, d, shuffle=True), 2),
    "defaults_loader": _loader,
    "defaults_writer": lambda m, d: _writer(m, d, "w"),
    "stratified_whole_batches": lambda m, d: _epochs(
        _mix(m, d, batching_method="stratified", batch_size=3)
    ),
    "resume_on_a_batch": lambda m, d: _resume(m, d, 4, batching_method="stratified"),
    "resume_mid_batch_random": lambda m, d: _resume(m, d, 3),
    "predownload_at_batch_size": lambda m, d: _ds(m, d, predownload=2) and None,
    "block_over_shards": lambda m, d: _epochs(_ds(m, d, shuffle=True, shuffle_block_size=20)),
    "writer_exist_ok_new_directory": lambda m, d: _writer(m, d, "w", exist_ok=True),
    # warned about
    "predownload_below_batch_size": lambda m, d: _ds(m, d, predownload=1, batch_size=4) and None,
    "block_under_a_shard": lambda m, d: _epochs(_ds(m, d, shuffle=True, shuffle_block_size=2)),
    "canonical_nodes_over_samples": lambda m, d: _epochs(_ds(m, d, num_canonical_nodes=16)),
    "stratified_drops": lambda m, d: _epochs(
        _mix(m, d, batching_method="stratified", batch_size=4)
    ),
    "per_stream_drops": lambda m, d: _epochs(
        _mix(m, d, batching_method="per_stream", batch_size=3)
    ),
    "device_per_stream_drops": lambda m, d: _epochs(
        _mix(m, d, batching_method="device_per_stream", batch_size=3)
    ),
    "resume_mid_batch_stratified": lambda m, d: _resume(m, d, 3, batching_method="stratified"),
    "resume_mid_batch_per_stream": lambda m, d: _resume(m, d, 3, batching_method="per_stream"),
    "resume_mid_batch_device_per_stream": lambda m, d: _resume(
        m, d, 3, batching_method="device_per_stream"
    ),
    "resume_before_training": _before_training,
    "writer_exist_ok_over_a_dataset": lambda m, d: _writer(m, d, "a", exist_ok=True),
}


# run on a World of one node of 2 ranks, one process per rank (``replication`` needs ranks to
# group); recorded per rank
RANK_CASES: dict[str, Callable[[Any, str], Any]] = {
    "replication_two_ranks": lambda m, d: _epochs(_ds(m, d, replication=2)),
    "two_ranks_defaults": lambda m, d: _epochs(_ds(m, d)),
}
RANKS = 2
_RANK_MAIN = """
import datetime, json, sys
import torch.distributed as dist
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
import streaming
from scripts.gen_mosaic_warnings_golden import RANK_CASES, run
print(json.dumps(run(streaming, sys.argv[1], sys.argv[2], RANK_CASES)))
"""


def facts(message: str, d: str) -> list[str]:
    """The numbers and setting names of ``message`` (the data directory left out)."""
    text = message.replace(d, " ")
    nums = {n for n in re.findall(r"(?<![\w.])\d+(?!\w|\.\d)", text)}
    return sorted(nums) + [w for w in WORDS if re.search(rf"`?\b{w}\b", text)]


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def run(
    m: Any, d: str, case: str, cases: dict[str, Callable[[Any, str], Any]] = CASES
) -> dict[str, Any]:
    """``{"warnings": [...], "error": builtin type name or None}``; each warning once (the
    same warning given again, at another epoch or stream, is not counted twice)."""
    handler = _Records()
    root = logging.getLogger()
    root.addHandler(handler)
    error = None
    try:
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            try:
                cases[case](m, d)
            except Exception as exc:
                error = next(t for t in type(exc).__mro__ if t.__module__ == "builtins").__name__
    finally:
        root.removeHandler(handler)
    seen: list[dict[str, Any]] = []
    for w in got:
        if w.category is ResourceWarning or "torch" in w.filename:
            continue  # the interpreter's and torch's own, not the library's
        item = {"kind": "warn", "category": w.category.__name__, "facts": facts(str(w.message), d)}
        if item not in seen:
            seen.append(item)
    for r in handler.records:
        if r.name.split(".")[0] in ("streaming", "astream"):
            item = {"kind": "log", "category": "WARNING", "facts": facts(r.getMessage(), d)}
            if item not in seen:
                seen.append(item)
    return {"warnings": seen, "error": error}


def _run_ranks(d: str, case: str) -> list[dict[str, Any]]:
    """``case`` of ``RANK_CASES`` on 2 ranks of the reference at once: each rank's ``run``."""
    import json
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    procs = []
    for r in range(RANKS):
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(RANKS))
        env.update(LOCAL_WORLD_SIZE=str(RANKS), MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        cmd = [sys.executable, "-c", _RANK_MAIN, d, case]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=120)[0] for p in procs]
    return [json.loads(o.strip().splitlines()[-1]) for o in outs]


def _inner() -> None:
    import tempfile

    import streaming

    out: dict[str, Any] = {}
    for case in CASES:
        with tempfile.TemporaryDirectory() as d:
            write(streaming, d)
            out[case] = run(streaming, d, case)
            print(case, out[case], flush=True)
    ranks: dict[str, Any] = {}
    for case in RANK_CASES:
        with tempfile.TemporaryDirectory() as d:
            write(streaming, d)
            ranks[case] = _run_ranks(d, case)
            print(case, ranks[case], flush=True)
    golden = {"reference": "mosaicml-streaming 0.13.0", "cases": out, "rank_cases": ranks}
    peer.write_golden(OUT, golden, indent=1)


if __name__ == "__main__":
    raise SystemExit(peer.main(__file__, __doc__, _inner, pythonpath=[ROOT]))
