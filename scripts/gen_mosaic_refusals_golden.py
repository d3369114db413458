#!/usr/bin/env python
"""Regenerate tests/engine/golden/mosaic_refusals.json from the reference (mosaicml-streaming
0.13.0).

Usage:  python scripts/gen_mosaic_refusals_golden.py [--peer-python .bench/peers-venv/bin/python]

It re-executes itself under the peer venv's python (see scripts/peer.py), writes the streams of
``scripts/gen_mosaic_mixing_golden.py`` with the reference's own ``MDSWriter``, and for each
configuration of ``CASES`` -- invalid or edge arguments: weights that are negative, zero,
fractional counts or of mixed kinds, zero and negative sizes, unknown names, ``predownload``
0 and -1, ``replication`` over the ranks, a missing split, ``streams`` beside ``local`` --
records what the reference does when the dataset is built and iterated once in one process:
the samples it yields, or the built-in type of the error it raises and where (``stream``,
``build`` or ``iter``). An iteration still running after ``HANG_S`` seconds is recorded as a
hang (the reference waits forever on ``predownload=-1``).
"""

from __future__ import annotations

try:
    import peer  # run as a script: scripts/ is sys.path[0]
except ImportError:  # imported by the tests as scripts.<name>, for its tables
    from scripts import peer

import os
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "engine", "golden", "mosaic_refusals.json")
HANG_S = 15

# name -> (streams as (name, weights), arguments); the single-stream cases read stream "a"
CASES: dict[str, tuple[list[tuple[str, dict]], dict]] = {
    "proportion_negative": ([("a", {"proportion": -1}), ("b", {"proportion": 1})], {}),
    "proportion_zero": ([("a", {"proportion": 0}), ("b", {"proportion": 1})], {}),
    "repeat_zero": ([("a", {"repeat": 0}), ("b", {})], {}),
    "repeat_negative": ([("a", {"repeat": -1}), ("b", {})], {}),
    "choose_zero": ([("a", {"choose": 0}), ("b", {})], {}),
    "choose_negative": ([("a", {"choose": -5}), ("b", {})], {}),
    "choose_fractional": ([("a", {"choose": 10.5}), ("b", {})], {}),
    "proportion_and_repeat": ([("a", {"proportion": 0.5, "repeat": 2}), ("b", {})], {}),
    "proportion_on_some": ([("a", {"proportion": 0.5}), ("b", {})], {}),
    "proportion_and_choose": ([("a", {"proportion": 0.5}), ("b", {"choose": 10})], {}),
    "repeat_and_choose": ([("a", {"repeat": 2}), ("b", {"choose": 10})], {}),
    "epoch_size_zero": ([], {"epoch_size": 0}),
    "epoch_size_negative": ([], {"epoch_size": -1}),
    "epoch_size_text": ([], {"epoch_size": "abc"}),
    "epoch_size_unweighted": ([], {"epoch_size": 10}),
    "batch_size_zero": ([], {"batch_size": 0}),
    "batch_size_negative": ([], {"batch_size": -1}),
    "canonical_nodes_zero": ([], {"num_canonical_nodes": 0}),
    "block_zero": ([], {"shuffle_block_size": 0, "shuffle": True}),
    "granularity_zero": ([], {"sampling_granularity": 0}),
    "sampling_method_unknown": ([], {"sampling_method": "x"}),
    "partition_algo_unknown": ([], {"partition_algo": "x"}),
    "shuffle_algo_unknown": ([], {"shuffle_algo": "x", "shuffle": True}),
    "batching_method_unknown": ([], {"batching_method": "x"}),
    "predownload_zero": ([], {"predownload": 0}),
    "predownload_negative": ([], {"predownload": -1}),
    "cache_limit_negative": ([], {"cache_limit": -1}),
    "download_retry_negative": ([], {"download_retry": -1}),
    "download_timeout_zero": ([], {"download_timeout": 0}),
    "replication_zero": ([], {"replication": 0}),
    "replication_over_the_ranks": ([], {"replication": 2}),
    "validate_hash_unknown": ([], {"validate_hash": "md5x"}),
    "split_missing": ([], {"split": "nope"}),
    "nothing_to_read": ([], {"local": None}),
    "shuffle_seed_negative": ([], {"shuffle_seed": -1}),
    "shuffle_not_a_bool": ([], {"shuffle": "yes"}),
    "streams_empty": ([], {"streams": []}),
    "streams_and_local": ([("a", {})], {"local": "b"}),
}


def arguments(case: str, paths: dict[str, str], stream: Any) -> dict[str, Any]:
    """The ``StreamingDataset`` arguments of ``case`` over the streams at ``paths`` (name ->
    directory), its ``Stream``s made by ``stream`` (either library's class; a bad weight raises
    there); the single-stream cases read stream ``a``."""
    parts, kw = CASES[case]
    kw = dict(kw)
    built = [stream(local=paths[name], **weights) for name, weights in parts]
    if built:
        kw["streams"] = built
    if kw.get("local") is not None:
        kw["local"] = paths[kw["local"]]
    elif "local" not in kw and "streams" not in kw:
        kw["local"] = paths["a"]
    kw.setdefault("batch_size", 4)
    return kw


def _inner() -> None:
    import gc
    import signal
    import tempfile
    import warnings

    from gen_mosaic_mixing_golden import write_streams
    from streaming import MDSWriter, Stream, StreamingDataset

    warnings.simplefilter("ignore")

    def hung(*_a: object) -> None:
        raise TimeoutError

    signal.signal(signal.SIGALRM, hung)
    out: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        written = write_streams(tmp, MDSWriter)
        shards = {name: got[1] for name, got in written.items()}
        paths = {name: got[0] for name, got in written.items()}
        for name in CASES:
            stage = "stream"
            signal.alarm(HANG_S)
            try:
                kw = arguments(name, paths, Stream)
                stage = "build"
                ds = StreamingDataset(**kw)
                stage = "iter"
                out[name] = {"samples": sum(1 for _ in ds)}
                del ds
            except TimeoutError:
                out[name] = {"hang": stage}
            except Exception as exc:
                builtin = next(t for t in type(exc).__mro__ if t.__module__ == "builtins")
                text = str(exc).replace(tmp, "<data>")[:200]  # the same in every run
                out[name] = {"error": builtin.__name__, "at": stage, "message": text}
            signal.alarm(0)
            gc.collect()
    meta = {"reference": "mosaicml-streaming 0.13.0", "hang_s": HANG_S, "shards": shards}
    peer.write_golden(OUT, {**meta, "cases": out}, indent=1)


if __name__ == "__main__":
    raise SystemExit(peer.main(__file__, __doc__, _inner, pythonpath=[ROOT]))
