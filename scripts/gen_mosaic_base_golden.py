#!/usr/bin/env python
"""Regenerate tests/core/golden/mosaic_base.json from the reference (mosaicml-streaming 0.13.0):
its ``streaming.base`` helpers' answers to the inputs below.

Usage:  python scripts/gen_mosaic_base_golden.py [--peer-python .venv-ref/bin/python]

``SIZES`` and ``COUNTS`` go through ``bytes_to_int`` and ``number_abbrev_to_int``; ``VALUES``
through ``mds_encode`` (hex), ``mds_decode`` of those bytes and ``get_mds_encoded_size``;
``NAMES`` through ``is_mds_encoding`` and ``is_mds_encoding_safe``; ``INDEXES`` into an
``Array`` of the items 0..9. ``tests/core/test_base_compat.py`` asks astream's
``astream.base`` the same.
"""

from __future__ import annotations

try:
    import peer  # run as a script: scripts/ is sys.path[0]
except ImportError:  # imported by the tests as scripts.<name>, for its tables
    from scripts import peer

import os
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "core", "golden", "mosaic_base.json")

SIZES: list[Any] = [
    0, 7, 2.9, "10", "10b", "10B", " 3kb ", "1.5kb", "2MB", "1gb", "1tb", "1pb", "1eb", "1zb",
    "1yb", "-1kb", "1e3kb", "abc", "kb", "1.5", "1k", "", "b", "0b",
]  # fmt: skip
COUNTS: list[Any] = [
    0, 7, 2.9, "10", "1k", "0.5k", "2B", " 3m ", "1t", "1.5M", "-2k", "abc", "1.5", "k", "",
    "-5", "1kb",
]  # fmt: skip
# (encoding, value as JSON; ndarray values are lists made arrays of the encoding's dtype)
VALUES: list[tuple[str, Any]] = [
    ("int", 5), ("int", -(2**40)), ("str", "héllo"), ("bytes", "raw"), ("uint8", 200),
    ("int16", -3), ("uint32", 7), ("int64", -9), ("float16", 1.5), ("float32", 0.25),
    ("float64", -2.5), ("str_int", 42), ("str_float", 3.25), ("str_decimal", "1.10"),
    ("json", {"a": [1, 2]}), ("ndarray:int32:3", [1, 2, 3]), ("ndarray:float32", [1.5, 2.0]),
    ("ndarray", [[1, 2], [3, 4]]),
]  # fmt: skip
NAMES = [
    "int", "str", "pkl", "json", "ndarray", "ndarray:int32", "ndarray:int32:3,4", "jpeg",
    "list[png]", "jpegarray", "nope", "",
]  # fmt: skip
INDEXES: list[Any] = [3, -1, -10, [1, 2], [[0], [9, -2]], "slice:2:5", "slice:-3:",
                      "slice:8:20", "slice::3", "array:4,5"]  # fmt: skip


def value(enc: str, raw: Any) -> Any:
    """The Python value of a ``VALUES`` entry for ``enc``."""
    import decimal

    import numpy as np

    if enc.startswith("ndarray"):
        parts = enc.split(":")
        return np.array(raw, dtype=parts[1] if len(parts) > 1 else "int64")
    if enc == "bytes":
        return raw.encode()
    if enc == "str_decimal":
        return decimal.Decimal(raw)
    if enc.startswith(("uint", "int", "float")) and enc != "int":
        return np.dtype(enc).type(raw)
    return raw


def plain(v: Any) -> Any:
    """A decoded value as JSON."""
    import numpy as np

    if isinstance(v, np.ndarray):
        return {"dtype": str(v.dtype), "shape": list(v.shape), "items": v.tolist()}
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, bytes):
        return v.decode()
    return str(v) if type(v).__name__ == "Decimal" else v


def index(at: Any) -> Any:
    """An ``INDEXES`` entry as an index (``slice:a:b[:c]``, ``array:i,j``)."""
    import numpy as np

    if isinstance(at, str) and at.startswith("slice:"):
        return slice(*(int(p) if p else None for p in at.split(":")[1:]))
    if isinstance(at, str) and at.startswith("array:"):
        return np.array([int(p) for p in at[6:].split(",")])
    return at


def outcome(f: Any, *args: Any) -> dict[str, Any]:
    try:
        return {"value": f(*args)}
    except Exception as exc:
        return {"error": next(t for t in type(exc).__mro__ if t.__module__ == "builtins").__name__}


def answers(util: Any, enc: Any, array_cls: Any) -> dict[str, Any]:
    """Every answer of one library (its util module, encodings module and Array class)."""

    class Items(array_cls):
        @property
        def size(self) -> int:
            return 10

        def get_item(self, idx: int) -> int:
            if not 0 <= idx < 10:
                raise IndexError(idx)
            return int(idx)

    coded = {}
    for k, (e, raw) in enumerate(VALUES):
        data = enc.mds_encode(e, value(e, raw))
        coded[f"{k}:{e}"] = {
            "hex": data.hex(),
            "decoded": plain(enc.mds_decode(e, data)),
            "size": enc.get_mds_encoded_size(e),
        }
    return {
        "bytes_to_int": [outcome(util.bytes_to_int, s) for s in SIZES],
        "number_abbrev_to_int": [outcome(util.number_abbrev_to_int, s) for s in COUNTS],
        "encodings": sorted(enc.get_mds_encodings()),
        "encode": coded,
        "is_mds_encoding": [enc.is_mds_encoding(n) for n in NAMES],
        "is_mds_encoding_safe": [enc.is_mds_encoding_safe(n) for n in NAMES],
        "unknown_encode": outcome(enc.mds_encode, "nope", 1),
        "array": [outcome(lambda at: Items()[index(at)], at) for at in INDEXES],
        "list_arg": [util.get_list_arg(t) for t in ("", "a", "a,b,,c")],
    }


def _inner() -> None:
    from streaming.base import util
    from streaming.base.array import Array
    from streaming.base.format.mds import encodings

    meta = {"reference": "mosaicml-streaming 0.13.0"}
    peer.write_golden(OUT, {**meta, **answers(util, encodings, Array)}, indent=1)


if __name__ == "__main__":
    raise SystemExit(peer.main(__file__, __doc__, _inner, pythonpath=[ROOT]))
