"""``StreamingCore``'s batch output: the planned per-device batches as columns
(``{column: array}``), with no Python object per sample (docs/batches.md)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from astream.dataset.iteration import check_resharding
from astream.errors import ConfigError
from astream.runtime.config import DatasetConfig
from astream.runtime.engine import Engine
from astream.shared import StaleIteration


def _same(x: Any) -> Any:
    return x


def _full_only(batches: Iterator[Any], size: int, progress: list[Any]) -> Iterator[Any]:
    """``batches`` less a short one (the epoch's last); it still counts as consumed."""
    from astream.core.batchdecode import batch_rows

    for b in batches:
        rows = b.rows if hasattr(b, "rows") else batch_rows(b)
        if rows == size:
            yield b


class _ColumnBatches:
    """The part of ``StreamingCore`` that yields column batches."""

    # set by StreamingCore._build, or its other parts
    pack: Any
    cfg: DatasetConfig
    engine: Engine
    transform: Callable[[Any], Any] | None
    _start_iteration: Callable[[], tuple[Iterator[np.ndarray[Any, Any]], list[int]]]
    _has_override: Callable[[], bool]
    _set_batch_size: Callable[[int | None], None]

    def _batch_converter(self, batch_format: str) -> Callable[[dict[str, Any]], Any]:
        """What turns a batch of numpy columns into ``batch_format`` (torch: the torch class)."""
        if batch_format == "numpy":
            return _same
        if batch_format == "torch":
            raise ConfigError(
                "batch_format='torch' needs astream.StreamingDataset (the torch dataset); "
                f"{type(self).__name__} gives batch_format='numpy'"
            )
        raise ConfigError(f"batch_format must be 'numpy' or 'torch', got {batch_format!r}")

    def _check_batch_output(self, batch_size: int | None, ragged: str) -> None:
        if batch_size is not None:
            if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
                raise ConfigError(f"batch_size must be an int >= 1, got {batch_size!r}")
            if self.cfg.batch_size is None:
                self._set_batch_size(batch_size)
            elif batch_size != self.cfg.batch_size:
                raise ConfigError(
                    f"batch_size={batch_size} differs from the dataset's batch_size="
                    f"{self.cfg.batch_size}: batches are the planned per-device batches"
                )
        if ragged not in ("pad", "offsets"):
            raise ConfigError(f"ragged must be 'pad' or 'offsets', got {ragged!r}")
        if self._has_override() or self.transform is not None:
            raise ConfigError(
                "batch output has no per-sample step: a transform= or a __getitem__/get_item "
                "override cannot run on it (iterate samples, or transform the batch)"
            )

    def batches(
        self,
        batch_size: int | None = None,
        *,
        batch_format: str = "numpy",
        ragged: str = "pad",
        drop_last: bool = False,
    ) -> Iterator[dict[str, Any]]:
        """The next epoch as planned per-device batches of columns: ``{column: array}``, with
        no Python object per sample (layout per encoding: docs/batches.md). Same order,
        epochs, ``state_dict`` and resumption as iterating samples with ``num_workers=0``.

        ``batch_size``: the dataset's (a dataset built without one plans with this one).
        ``batch_format``: ``"numpy"`` or ``"torch"`` (``astream.StreamingDataset`` only).
        ``ragged``: variable-size columns as ``"pad"`` (``(n, max)`` zero-padded plus
        ``<col>_len``) or ``"offsets"`` (flat values plus ``<col>_offsets``, ``n + 1``).
        ``drop_last``: skip the epoch's last batch when it is short.
        """
        if self.pack is not None:
            from astream.packing import packed_batches

            return packed_batches(self, batch_size, batch_format, ragged, drop_last)
        self._check_batch_output(batch_size, ragged)
        convert = self._batch_converter(batch_format)
        return self._column_batches(convert, ragged, drop_last, None)

    def _column_batches(
        self,
        convert: Callable[[dict[str, Any]], Any],
        ragged: str,
        drop_last: bool,
        finish: Callable[[Any], Any] | None,
    ) -> Iterator[Any]:
        """One iteration of column batches; ``finish(column_batch)`` overrides where a batch is
        allocated (a worker's shared memory)."""
        check_resharding(self.cfg.replication)
        try:
            batches, progress = self._start_iteration()
        except StaleIteration:
            return iter(())
        if finish is None:

            def finish(cb: Any) -> Any:
                return convert(cb.finish())

        out = self.engine.iter_columns(batches, finish, ragged, progress)
        if not drop_last:
            return out
        return _full_only(out, self.cfg.batch_or_1, progress)
