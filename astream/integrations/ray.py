"""``MDSDatasink``: write a Ray Dataset as MDS (``ds.write_datasink(MDSDatasink(out, columns))``).

Theory of operation
-------------------
``on_write_start`` (driver) validates every MDSWriter argument by building one on a temp
directory and refuses a non-empty output unless ``exist_ok=True``. Each write task turns its
blocks (Arrow tables or pandas DataFrames) into samples
(:func:`~astream.integrations.frames.frame_samples`) and writes them with
:func:`~astream.writer.parts.write_part` as ``out/<task index>``: local output is published by
an atomic rename of an attempt-specific directory, remote output is uploaded while the task
writes, index.json last. A retried task (Ray retries a task whose worker died) has the same task
index, so it replaces its own sub-dataset instead of adding one. ``on_write_complete`` (driver)
merges the sub-datasets that the accepted write tasks returned, in task order, and deletes what
killed attempts left; ``partition_counts`` then holds the samples per task. A dataset with no
rows (no write task, or tasks that wrote nothing) is an EmptyDatasetError there, as Spark's
``dataframe_to_mds`` and ``astream convert`` raise for theirs; its empty local parts are
removed and nothing is merged.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ray.data import Datasink

from astream.errors import EmptyDatasetError
from astream.integrations.frames import drop_empty_output, frame_samples
from astream.writer.parts import (
    PartResult,
    check_output,
    finish_parts,
    validate_writer_kwargs,
    write_part,
)

__all__ = ["MDSDatasink"]


class MDSDatasink(Datasink[PartResult]):  # type: ignore[misc]
    """A Ray Data datasink writing MDS at ``out`` (path, URL or ``(local, remote)``).

    ``columns``: name -> MDS encoding. ``merge_index``: build ``out/index.json`` at the end.
    ``exist_ok``: overwrite a non-empty output. Other keyword arguments go to MDSWriter
    (``compression``, ``hashes``, ``size_limit``, ...)."""

    def __init__(
        self,
        out: Any,
        columns: Mapping[str, str],
        *,
        merge_index: bool = True,
        exist_ok: bool = False,
        **writer_kwargs: Any,
    ) -> None:
        self.out = out
        self.columns = dict(columns)
        self.merge_index = merge_index
        self.exist_ok = exist_ok
        self.writer_kwargs = {"columns": self.columns, **writer_kwargs}
        validate_writer_kwargs(self.writer_kwargs)
        self.partition_counts: list[int] = []

    def on_write_start(self, *args: Any, **kwargs: Any) -> None:
        check_output(self.out, self.exist_ok)

    def write(self, blocks: Iterable[Any], ctx: Any) -> PartResult:
        def samples() -> Iterable[dict[str, Any]]:
            for block in blocks:
                yield from frame_samples(block, self.columns)

        return write_part(samples(), self.out, ctx.task_idx, self.writer_kwargs)

    def on_write_complete(self, write_result: Any) -> None:
        results = [r for r in write_result.write_returns if r is not None]
        if not any(r.samples for r in results):
            drop_empty_output(self.out)
            raise EmptyDatasetError("dataset is empty: no rows to write")
        self.partition_counts = finish_parts(self.out, results, self.merge_index)

    def get_name(self) -> str:
        return "MDS"
