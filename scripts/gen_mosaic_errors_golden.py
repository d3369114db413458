#!/usr/bin/env python
"""Regenerate tests/engine/golden/mosaic_errors.json from the reference (mosaicml-streaming
0.13.0): what it raises, or returns, for the inputs of ``CASES``.

Usage:  python scripts/gen_mosaic_errors_golden.py [--peer-python .venv-ref/bin/python]

Each case is a function of the library's top module and a directory holding two datasets
written by that library (``a``: 10 samples ``{"x": i}``; ``e``: none). The golden records the
value it returns, or the built-in type of its error and the message.
``tests/engine/test_reference_errors.py`` runs the same functions with astream.
"""

from __future__ import annotations

try:
    import peer  # run as a script: scripts/ is sys.path[0]
except ImportError:  # imported by the tests as scripts.<name>, for its cases
    from scripts import peer

import importlib
import os
from collections.abc import Callable
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "engine", "golden", "mosaic_errors.json")


def write(m: Any, d: str) -> None:
    """The two datasets of every case, with ``m``'s writer."""
    with m.MDSWriter(out=os.path.join(d, "a"), columns={"x": "int"}) as w:
        for i in range(10):
            w.write({"x": i})
    with m.MDSWriter(out=os.path.join(d, "e"), columns={"x": "int"}):
        pass


def _ds(m: Any, d: str, **kw: Any) -> Any:
    kw.setdefault("batch_size", 2)
    return m.StreamingDataset(local=os.path.join(d, "a"), **kw)


def _padded_resume(m: Any, d: str) -> list[int]:
    """10 samples over 8 canonical nodes: the reference's epoch is padded to 16; a checkpoint
    after 14 of them, loaded by a new dataset. The epoch's length, then what is left."""
    kw = {"shuffle": True, "shuffle_algo": "py1s", "num_canonical_nodes": 8, "batch_size": 1}
    ds = _ds(m, d, **kw)
    first = len(list(ds))
    state = ds.state_dict(14, True)
    again = _ds(m, d, **kw)
    again.load_state_dict(state)
    return [first, len(list(again))]


def _writer(m: Any, d: str, out: str, **kw: Any) -> Any:
    kw.setdefault("columns", {"x": "int"})
    return m.MDSWriter(out=os.path.join(d, out), **kw)


def _sub(m: Any, name: str) -> Any:
    """The library's submodule ``name`` (the same dotted path in both libraries)."""
    return importlib.import_module(f"{m.__name__}.{name}")


def _unsafe(m: Any, d: str) -> None:
    """A dataset with a pickled column, read without ``allow_unsafe_types``."""
    with _writer(m, d, "p", columns={"num": "pkl"}) as w:
        w.write({"num": 1})
    m.StreamingDataset(local=os.path.join(d, "p"), batch_size=1)


def _encode(m: Any, value: Any) -> Any:
    return _sub(m, "base.format.mds.encodings").mds_encode("ndarray", value)


CASES: dict[str, Callable[[Any, str], Any]] = {
    "getitem_float": lambda m, d: _ds(m, d)[1.5],
    "getitem_str": lambda m, d: _ds(m, d)["1"],
    "getitem_past_the_end": lambda m, d: _ds(m, d)[10],
    "getitem_negative": lambda m, d: _ds(m, d)[-1],
    "get_item_past_the_end": lambda m, d: _ds(m, d).get_item(10),
    "get_item_negative": lambda m, d: _ds(m, d).get_item(-1),
    "stream_without_samples_in_a_mix": lambda m, d: sum(
        1
        for _ in m.StreamingDataset(
            streams=[m.Stream(local=os.path.join(d, n)) for n in ("a", "e")], batch_size=2
        )
    ),
    "checkpoint_inside_the_padding": _padded_resume,
    "writer_output_not_empty": lambda m, d: _writer(m, d, "a") and None,
    "writer_unknown_encoding": lambda m, d: _writer(m, d, "w1", columns={"x": "nope"}) and None,
    "writer_sample_without_a_column": lambda m, d: _writer(m, d, "w2").write({"y": 1}),
    "writer_value_of_another_type": lambda m, d: _writer(m, d, "w7").write({"x": "seven"}),
    "writer_unknown_compression": lambda m, d: _writer(m, d, "w3", compression="foo") and None,
    "writer_unknown_hash": lambda m, d: _writer(m, d, "w4", hashes=["foo"]) and None,
    "writer_negative_size_limit": lambda m, d: _writer(m, d, "w5", size_limit=-1) and None,
    "writer_size_limit_text": lambda m, d: _writer(m, d, "w6", size_limit="abc") and None,
    "epoch_size_text": lambda m, d: len(_ds(m, d, epoch_size="abc")),
    "unknown_argument": lambda m, d: _ds(m, d, foo=1) and None,
    "encode_ndarray_without_elements": lambda m, d: _encode(m, __import__("numpy").zeros(0)),
    "encode_ndarray_scalar": lambda m, d: _encode(m, __import__("numpy").array(0.5)),
    "bytes_text_empty": lambda m, d: _sub(m, "base.util").bytes_to_int(""),
    "bytes_text_bad_suffix": lambda m, d: _sub(m, "base.util").bytes_to_int("12kbb"),
    "number_text_bad_suffix": lambda m, d: _sub(m, "base.util").number_abbrev_to_int("79bk"),
    "sampling_method_unknown": lambda m, d: _ds(m, d, sampling_method="ayo") and None,
    "dataset_without_samples": lambda m, d: (
        m.StreamingDataset(local=os.path.join(d, "e"), batch_size=2) and None
    ),
    "writer_size_limit_over_u32": lambda m, d: _writer(m, d, "w8", size_limit=1 << 32) and None,
    "writer_unknown_argument": lambda m, d: _writer(m, d, "w9", min_workers=1) and None,
    "unsafe_type_not_allowed": _unsafe,
    "fewer_samples_than_canonical_nodes": lambda m, d: sum(
        1 for _ in _ds(m, d, shuffle=True, num_canonical_nodes=11)
    ),
    "local_without_index": lambda m, d: (
        m.StreamingDataset(streams=[m.Stream(local=os.path.join(d, "none"))], batch_size=1) and None
    ),
}


def run(m: Any, d: str, case: str) -> dict[str, Any]:
    """``{"value": ...}`` or ``{"error": builtin type name, "message": text}``."""
    try:
        return {"value": CASES[case](m, d)}
    except Exception as exc:
        builtin = next(t for t in type(exc).__mro__ if t.__module__ == "builtins")
        return {"error": builtin.__name__, "message": str(exc).replace(d, "<data>")[:160]}


def _inner() -> None:
    import tempfile
    import warnings

    import streaming

    warnings.simplefilter("ignore")
    out = {}
    for case in CASES:
        with tempfile.TemporaryDirectory() as d:
            write(streaming, d)
            out[case] = run(streaming, d, case)
    peer.write_golden(OUT, {"reference": "mosaicml-streaming 0.13.0", "cases": out}, indent=1)


if __name__ == "__main__":
    raise SystemExit(peer.main(__file__, __doc__, _inner, pythonpath=[ROOT]))
