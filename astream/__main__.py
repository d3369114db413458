"""``python -m astream``: the same as the ``astream`` command."""

from __future__ import annotations

import sys

from astream.cli import main

if __name__ == "__main__":
    sys.exit(main())
