"""Write MDS from Ray Data: ``from astream.ray import MDSDatasink`` (needs ``astream[ray]``).

The implementation lives in :mod:`astream.integrations.ray`; see its docstring and docs/ray.md.
"""

from __future__ import annotations

from astream.integrations.ray import MDSDatasink

__all__ = ["MDSDatasink"]
