#!/usr/bin/env python
"""Regenerate tests/golden/data/ with the reference writer (mosaicml-streaming 0.13.0).

Usage:  python scripts/gen_golden.py [--peer-python /work/peervenv/bin/python] [--only NAME]

Run with any python: it re-executes itself under the peer venv's python (which has
``mosaicml-streaming==0.13.0`` installed) with a stub ``torchvision`` package on PYTHONPATH;
``import streaming`` imports torchvision, whose registry build does not load beside the CPU
torch here, and nothing this script calls uses it. The samples and writer parameters come from
tests/golden/golden_samples.py, which the tests import too.
"""

from __future__ import annotations

try:
    import peer  # run as a script: scripts/ is sys.path[0]
except ImportError:  # imported by the tests as scripts.<name>, for its case tables
    from scripts import peer

import os
import shutil
import sys
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN = os.path.join(ROOT, "tests", "golden")
OUT = os.path.join(GOLDEN, "data")


def _outer(peer_python: str, only: list[str]) -> int:
    args = [a for name in only for a in ("--only", name)]
    return peer.reexec(peer_python, __file__, pythonpath=[GOLDEN], args=args)


def _inner(only: list[str]) -> None:
    import golden_samples as gs
    from streaming import MDSWriter
    from streaming.base.format.json import JSONWriter
    from streaming.base.format.xsv import CSVWriter, TSVWriter
    from streaming.base.util import merge_index

    writers = {"mds": MDSWriter, "json": JSONWriter, "csv": CSVWriter, "tsv": TSVWriter}
    if only:
        # just these fixtures, the others untouched (a full run rewrites gz_1's timestamps)
        for name in only:
            if name not in gs.SPECS or "/" in name:
                raise SystemExit(f"--only: no single fixture {name!r} in golden_samples.SPECS")
            shutil.rmtree(os.path.join(OUT, name), ignore_errors=True)
        _write_specs(gs, writers, only)
        return
    shutil.rmtree(OUT, ignore_errors=True)
    _write_specs(gs, writers, list(gs.SPECS))
    merge_index(os.path.join(OUT, "merged"), keep_local=True)
    import gen_golden_xsv  # data/split/ (json, csv, tsv, xsv writers), cleared above too

    gen_golden_xsv.write_all()
    total = sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(OUT) for f in files)
    print(f"total {total} bytes under {OUT}")


def _write_specs(gs: Any, writers: dict[str, Any], names: list[str]) -> None:
    for name in names:
        spec = gs.SPECS[name]
        cls = writers[spec.get("writer", "mds")]
        out = os.path.join(OUT, name)
        with cls(
            out=out,
            columns=spec["columns"],
            compression=spec["compression"],
            hashes=spec["hashes"],
            size_limit=spec["size_limit"],
        ) as w:
            for sample in gs.samples_for(name):
                w.write(sample)
        print(f"wrote {name}: {sorted(os.listdir(out))}")


def main() -> int:
    ap = peer.parser(__doc__)
    ap.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="NAME",
        help="regenerate just this fixture (repeatable), e.g. --only exact_limit",
    )
    args = ap.parse_args()
    if args.inner:
        _inner(args.only)
        return 0
    return _outer(args.peer_python, args.only)


if __name__ == "__main__":
    sys.exit(main())
