"""The ``astream`` command: convert, inspect, verify, cache, bench, demo, index, top, plan.

Theory of operation
-------------------
``main`` builds one argparse parser; each subcommand lives in its own module with an
``add_parser(sub)`` that registers its arguments and a ``run(args) -> int``. Heavy imports
(torch, pyarrow, cloud SDKs) happen inside the subcommand that needs them, so ``astream
--help`` is instant. Every :class:`~astream.errors.AstreamError` and ``OSError`` is caught
here and printed as one line, ``astream: error: ...``, with exit code 2 (argparse's usage
errors use 2 as well); exit code 1 is reserved for "ran fine, found a problem" (``verify``).

May import: every layer (it is the top). Only ``astream.__main__`` imports it: a helper another
layer needs lives in that layer (reading an index by URL is astream.runtime.locate).
tests/test_layers.py checks it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from astream import __version__
from astream.errors import AstreamError

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    from astream import demo
    from astream.cli import bench, cache, convert, index, inspect, plan, top, verify

    ap = argparse.ArgumentParser(
        prog="astream",
        description="Convert, inspect, verify and stream MDS datasets.",
    )
    ap.add_argument("--version", action="version", version=f"astream {__version__}")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for mod in (convert, inspect, verify, cache, bench, demo, index, top, plan):
        mod.add_parser(sub)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except KeyboardInterrupt:
        print("astream: interrupted", file=sys.stderr)
        return 130
    except (AstreamError, OSError) as exc:
        text = str(exc).replace("\n", " ")
        print(f"astream: error: {text}", file=sys.stderr)
        return 2
    sys.stdout.flush()
    return code
