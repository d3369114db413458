#!/usr/bin/env python
"""Regenerate tests/order/golden/mosaic/batching_redeal.npz from the reference (0.13.0).

Usage:  python scripts/gen_mosaic_batching_redeal_golden.py --peer-python .venv-ref/bin/python

The per-stream batching methods resumed on a World whose nodes and canonical nodes do not
divide one another, with the checkpoint's ``initial_physical_nodes``: the reference partitions
each stream with its "relaxed" re-deal (``per_stream`` on the World's nodes; ``stratified``
and ``device_per_stream`` partition for one node or for the canonical nodes, which always
divide). For every case it records ``generate_work``'s whole array, as int16, built exactly as
``scripts/gen_mosaic_order_golden.py`` builds the other batching goldens.
"""

from __future__ import annotations

try:
    import peer  # run as a script: scripts/ is sys.path[0]
    from gen_mosaic_order_golden import BATCHING_STREAMS, reference_case, write_batching_golden
except ImportError:  # imported by the tests as scripts.<name>, for its case table
    from scripts import peer
    from scripts.gen_mosaic_order_golden import (
        BATCHING_STREAMS,
        reference_case,
        write_batching_golden,
    )

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "order", "golden", "mosaic", "batching_redeal.npz")

# (num_canonical_nodes, initial nodes, World): global batches of 8 per device, 48 = 3 x 2 x 8
# = 2 initial nodes x 2 ranks x 12; 24 = 3 x 1 x 8 = 4 x 1 x 6; 48 = 6 x 1 x 8 = 4 x 1 x 12
REDEALS = ((2, 2, (3, 2, 2)), (4, 4, (3, 1, 1)), (4, 4, (6, 1, 2)))


def cases() -> list[dict]:
    out = []
    for algo in ("py1e", "py1s", None):
        for method in ("per_stream", "stratified"):
            for ncn, initial, shape in REDEALS:
                for streams in BATCHING_STREAMS:
                    for start in (0, 48):
                        out.append(
                            reference_case(
                                algo,
                                ncn,
                                shape,
                                1,
                                start,
                                streams,
                                seed=43,
                                batch=8,
                                method=method,
                                initial_physical_nodes=initial,
                            )
                        )
    return out


def _inner() -> None:
    import logging
    import warnings

    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    write_batching_golden(OUT, cases())


def main() -> int:
    return peer.main(__file__, __doc__, _inner, pythonpath=[os.path.dirname(__file__)])


if __name__ == "__main__":
    sys.exit(main())
