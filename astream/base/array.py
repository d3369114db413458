"""The reference's ``Array``: a read-only sequence a subclass defines by ``size`` and
``get_item``, indexed like a numpy array (an int, a slice, a list or an array of indices,
nested)."""

from __future__ import annotations

from typing import Any

import numpy as np

from astream.errors import IndexTypeError

__all__ = ["Array"]


class Array:
    """Subclasses give ``size`` and ``get_item(i)`` for ``0 <= i < size``; ``a[...]`` does
    the rest. A negative int counts from the end; a slice clamps its bounds into the array, as
    a Python list's; a list or array gives a list, element by element (nested lists nest)."""

    @property
    def size(self) -> int:
        raise NotImplementedError

    def get_item(self, idx: int) -> Any:
        raise NotImplementedError

    def __getitem__(self, at: Any) -> Any:
        if isinstance(at, (int, np.integer)):
            at = int(at)
            return self.get_item(at + self.size if -self.size <= at < 0 else at)
        if isinstance(at, slice):
            return [self.get_item(i) for i in range(*at.indices(self.size))]
        if isinstance(at, (list, np.ndarray)):
            return [self[sub] for sub in at]
        raise IndexTypeError(f"index must be an int, slice, list or array, got {type(at).__name__}")
