"""Helpers shared by the subcommands: locating a dataset, reading its index, formatting sizes.

Locating and reading live in :mod:`astream.runtime.locate` (``astream.plan`` uses them too,
and may not import the CLI); they are named here for the subcommands. Every error is an
:mod:`astream.errors` type, which ``main`` turns into one line on stderr.
"""

from __future__ import annotations

from astream.runtime.locate import is_local, join_split, local_path, read_index

__all__ = ["human_bytes", "is_local", "join_split", "local_path", "read_index"]


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")
