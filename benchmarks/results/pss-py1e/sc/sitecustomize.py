"""Sets ``astream.runtime.batch.MAP_LIMIT`` from ``ASTREAM_X_MAP_LIMIT`` in every process that
has this directory on its PYTHONPATH (the runner and its DataLoader workers): see
``ab_limit.py``."""

import os

if os.environ.get("ASTREAM_X_MAP_LIMIT"):
    import astream.runtime.batch as _batch

    _batch.MAP_LIMIT = int(os.environ["ASTREAM_X_MAP_LIMIT"])
