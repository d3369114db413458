#!/usr/bin/env python
"""Regenerate tests/order/golden/mosaic/partition_edges.json from the reference (0.13.0).

Usage:  python scripts/gen_mosaic_partition_edges_golden.py --peer-python .venv-ref/bin/python

Small epochs at the edges of the reference's partition, which the order goldens (whole
datasets, a few Worlds) do not reach: as many or fewer samples than canonical nodes, on fewer
and on more physical nodes than canonical ones (the tiled layout, wider than one column); rows
of unequal length; too few columns for the ranks (the tiled rank padding); resume positions
that are not a multiple of the nodes, and past the epoch. For every case it records
``streaming.base.partition.get_partitions(algo, ...)``'s whole array (its shape and its values
flattened), or the reference's exception type and message. ``relaxed`` cases re-deal an
initial World's partition on a World whose nodes do not divide the canonical ones.
"""

from __future__ import annotations

try:
    import peer  # run as a script: scripts/ is sys.path[0]
except ImportError:  # imported by the tests as scripts.<name>, for its case table
    from scripts import peer

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "order", "golden", "mosaic", "partition_edges.json")


def cases() -> list[dict]:
    """samples x canonical nodes x nodes (compatible) x ranks x workers x batch x resume."""
    out = []
    for n in (1, 2, 3, 4, 5, 7, 13):
        for ncn in (1, 2, 4):
            for pn in (1, 2, 4, 8):
                if (pn > ncn and pn % ncn) or (ncn > pn and ncn % pn):
                    continue
                for rpn in (1, 3):
                    for workers in (1, 2):
                        for bs in (1, 3):
                            for drop in (0, 3, 2 * n + 9):
                                out.append(
                                    {"algo": "orig", "n": n, "ncn": ncn, "pn": pn, "rpn": rpn,
                                     "workers": workers, "bs": bs, "drop": drop,
                                     "initial": None}
                                )  # fmt: skip
    # relaxed: World nodes 3 against canonical 2 or 4 (neither divides), initial 1, 2 or 4
    for n in (5, 12, 29, 40):
        for ncn in (2, 4):
            for initial in (1, 2, 4):
                for rpn in (1, 2):
                    for bs in (2, 4):
                        for drop in (0, 5, 12):
                            out.append(
                                {"algo": "relaxed", "n": n, "ncn": ncn, "pn": 3, "rpn": rpn,
                                 "workers": 2, "bs": bs, "drop": drop, "initial": initial}
                            )  # fmt: skip
    return out


def _inner() -> None:
    import logging
    import warnings

    logging.disable(logging.WARNING)  # the reference logs each rounded-down resume position
    from streaming.base.partition import get_partitions

    out = []
    for c in cases():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got = get_partitions(c["algo"], c["n"], c["ncn"], c["pn"], c["rpn"], c["workers"],
                                     c["bs"], c["drop"], c["initial"])  # fmt: skip
            out.append(dict(c, shape=list(got.shape), ids=[int(x) for x in got.ravel()]))
        except Exception as e:  # the reference's refusal is part of its behaviour
            out.append(dict(c, error=[type(e).__name__, str(e)]))
    golden = {"reference": "mosaicml-streaming 0.13.0", "cases": out}
    peer.write_golden(OUT, golden, separators=(",", ":"))


def main() -> int:
    return peer.main(__file__, __doc__, _inner)


if __name__ == "__main__":
    sys.exit(main())
