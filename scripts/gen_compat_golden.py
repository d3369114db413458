#!/usr/bin/env python
"""Regenerate tests/core/compat_golden.json: what mosaicml-streaming 0.13.0 does with arguments
and in error situations, recorded for astream's compatibility tests.

Usage:  python scripts/gen_compat_golden.py [--peer-python /work/peervenv/bin/python]

Re-executes itself under the peer venv (as scripts/gen_golden.py does, with its torchvision
stub) and records:

- ``abbrev``: the reference's ``epoch_size`` number parser on a table of inputs (int or the
  built-in error type);
- ``bytes``: the reference's ``cache_limit`` byte-size parser on a table of inputs;
- ``cases``: for each situation in tests/core/compat_cases.py, the exception type raised and
  which of the built-in types callers catch it is an instance of;
- ``weights``: each Stream's proportion/repeat/choose after the dataset is built, and the
  dataset's epoch size, for a few weightings.
"""

from __future__ import annotations

try:
    import peer  # run as a script: scripts/ is sys.path[0]
except ImportError:  # imported by the tests as scripts.<name>, for its case tables
    from scripts import peer

import json
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "core", "compat_golden.json")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# Inputs for the number parsers (strings only: ints/floats are passed through by both).
ABBREV_INPUTS = [
    "1k",
    "1K",
    "2b",
    "2B",
    "3m",
    "4t",
    "1.5k",
    "0.5m",
    " 7k ",
    "7 k",
    "1e3",
    "1e3k",
    "12",
    "0",
    "0k",
    "-5",
    "-5k",
    "1_000",
    "1_000k",
    "+3k",
    "k",
    "",
    " ",
    "1kb",
    "1 000",
    "abc",
    "1.5",
    "2.0b",
    "inf",
    "nan",
    "infk",
    "1g",
    "٣k",
]
BYTES_INPUTS = [
    "1kb",
    "1KB",
    "1.5kb",
    "64mb",
    "2gb",
    "1tb",
    "10b",
    "10",
    " 10 ",
    "10 kb",
    "1e3kb",
    "-1kb",
    "kb",
    "b",
    "",
    "1k",
    "abc",
    "0.5",
    "1pb",
    "1yb",
]
WEIGHTINGS = {
    "proportion_even": ({"proportion": 1.0}, {"proportion": 3.0}, None),
    "proportion_epoch": ({"proportion": 1.0}, {"proportion": 1.0}, 30),
    "repeat_choose": ({"repeat": 0.5}, {"choose": 7}, None),
    "unweighted": ({}, {}, None),
    "unweighted_epoch": ({}, {}, 10),
    "repeat_fraction": ({"repeat": 1.5}, {}, None),
}
WEIGHT_SIZES = (20, 30)


def _parse(fn, text):
    try:
        return {"value": fn(text)}
    except Exception as exc:
        return {"error": type(exc).__name__}


def _inner() -> None:
    import types

    import compat_cases
    import streaming
    from streaming.base.util import bytes_to_int, number_abbrev_to_int

    api = types.SimpleNamespace(
        StreamingDataset=streaming.StreamingDataset,
        Stream=streaming.Stream,
        MDSWriter=streaming.MDSWriter,
        name="streaming",
    )
    out: dict = {"reference": f"mosaicml-streaming {streaming.__version__}"}
    out["abbrev"] = {t: _parse(number_abbrev_to_int, t) for t in ABBREV_INPUTS}
    out["bytes"] = {t: _parse(bytes_to_int, t) for t in BYTES_INPUTS}
    cases = {}
    for name in sorted(compat_cases.CASES):
        with tempfile.TemporaryDirectory() as tmp:
            exc, desc = compat_cases.run_case(api, name, tmp)
        desc["message"] = None if exc is None else str(exc)[:300].replace(tmp, "<tmp>")
        cases[name] = desc
        print(f"{name}: {desc['raised']} {desc['builtins']}")
    out["cases"] = cases
    weights = {}
    for name, (wa, wb, epoch) in WEIGHTINGS.items():
        with tempfile.TemporaryDirectory() as tmp:
            a = compat_cases.write(api, os.path.join(tmp, "a"), n=WEIGHT_SIZES[0])
            b = compat_cases.write(api, os.path.join(tmp, "b"), n=WEIGHT_SIZES[1])
            streams = [streaming.Stream(local=a, **wa), streaming.Stream(local=b, **wb)]
            ds = streaming.StreamingDataset(streams=streams, epoch_size=epoch, batch_size=1)
            weights[name] = {
                "epoch_size": int(ds.epoch_size),
                "streams": [
                    {
                        "proportion": float(s.proportion),
                        "repeat": float(s.repeat),
                        "choose": int(s.choose),
                    }
                    for s in streams
                ],
            }
    out["weights"] = weights
    with open(OUT, "w") as f:
        json.dump(out, f, indent=1, sort_keys=True, ensure_ascii=True)
        f.write("\n")
    print(f"wrote {OUT}")


def main() -> int:
    return peer.main(
        __file__,
        __doc__,
        _inner,
        pythonpath=[os.path.join(ROOT, "tests", "core")],
        env={"PYTHONHASHSEED": "0"},  # the reference prints sets in its messages
    )


if __name__ == "__main__":
    sys.exit(main())
