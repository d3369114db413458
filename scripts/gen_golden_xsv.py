#!/usr/bin/env python
"""Regenerate tests/golden/data/split/ with the reference's JSON/CSV/TSV/XSV writers.

Usage:  python scripts/gen_golden_xsv.py [--peer-python /work/peervenv/bin/python]

Like scripts/gen_golden.py (whose stub ``torchvision`` it reuses), it re-executes itself under
the peer venv's python, which has ``mosaicml-streaming==0.13.0``. The fixture specs and rows
come from tests/golden/split_specs.py, which the tests import too. gen_golden.py calls
``write_all`` after its own fixtures, since it clears tests/golden/data/ first.
"""

from __future__ import annotations

try:
    import peer  # run as a script: scripts/ is sys.path[0]
except ImportError:  # imported by the tests as scripts.<name>, for its case tables
    from scripts import peer

import os
import shutil
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN = os.path.join(ROOT, "tests", "golden")
OUT = os.path.join(GOLDEN, "data", "split")
MDS_CONFIG_COLUMNS = {"tokens": "ndarray:uint16", "text": "str", "label": "int", "img": "jpeg"}


def write_all() -> None:
    """Write every split fixture (call under the peer venv, golden dir on sys.path)."""
    import split_specs as ss
    from streaming.base.format.json import JSONWriter
    from streaming.base.format.xsv import CSVWriter, TSVWriter, XSVWriter

    writers = {"json": JSONWriter, "csv": CSVWriter, "tsv": TSVWriter, "xsv": XSVWriter}
    shutil.rmtree(OUT, ignore_errors=True)
    configs = {}
    for name, spec in ss.SPECS.items():
        out = os.path.join(OUT, name)
        with writers[spec["writer"]](out=out, columns=spec["columns"], **spec["kwargs"]) as w:
            for row in ss.samples_for(name):
                w.write(row)
            configs[name] = w.get_config()
        print(f"wrote {name}: {sorted(os.listdir(out))}")
    # what the reference's get_config returns (key order kept), for the get_config tests
    import json

    from streaming import MDSWriter

    with (
        tempfile.TemporaryDirectory() as tmp,
        MDSWriter(
            out=os.path.join(tmp, "mds"),
            columns=MDS_CONFIG_COLUMNS,
            compression="zstd:7",
            hashes=["md5", "sha1"],
            size_limit="1kb",
        ) as w,
    ):
        configs["mds"] = w.get_config()
    with open(os.path.join(OUT, "get_config.json"), "w") as f:
        json.dump(configs, f, indent=1)
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(OUT) for f in files)
    print(f"total {total} bytes under {OUT}")


def main() -> int:
    return peer.main(__file__, __doc__, write_all, pythonpath=[GOLDEN])


if __name__ == "__main__":
    sys.exit(main())
