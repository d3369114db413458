"""Partitioned MDS output for distributed engines: one sub-dataset per task, safe under retries.

Theory of operation
-------------------
Spark and Ray convert a dataset as many tasks, one per partition (Spark) or write task (Ray).
Each task writes its rows as one MDS sub-dataset named after its *partition number*
(``out/00007``), never after its attempt, so a partition has exactly one name whatever the
number of attempts; the driver then merges the sub-datasets it was told about into
``out/index.json`` (:func:`finish_parts`).

Publishing one partition (:func:`write_part`) is where retries are made harmless:

- **Local output.** An attempt writes into a hidden, attempt-specific directory
  (``out/.00007.attempt-<id>``) and, once its index.json is complete, publishes it with a rename
  onto ``out/00007``. A partition already published by an earlier attempt (a task that failed
  after publishing, a speculative twin) is first renamed aside and deleted, so the visible
  directory is always one whole attempt. A killed attempt leaves only its hidden directory,
  which :func:`finish_parts` deletes.
- **Object-store output.** There is no rename, so an attempt uploads under ``out/00007/``
  directly and ``index.json`` goes last (the writer's sink contract). The writer runs with
  ``exist_ok=True`` (``writer/publish.py``): a retry finding an earlier attempt's objects
  there first replaces its index by an empty one, deletes the rest, then uploads its shards
  and its own index.json, which names only its own shards. The index is the publication.

Either way the merged index names each partition's shards once, from the attempt whose result
the engine accepted, so no sample is duplicated. Remote caveat: two attempts racing on the
same partition (speculation) make at least one of them fail (every upload is a conditional
write), and the engine's retry or the other attempt publishes the partition.

A rerun into a non-empty output is refused (:func:`check_output`) unless the caller passes
``exist_ok=True``, which empties a local output first (a remote one is replaced partition by
partition as each is written).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from astream.core.index import INDEX_BASENAME
from astream.errors import ConfigError, OutputExistsError
from astream.writer.mds import MDSWriter
from astream.writer.output import split_out

__all__ = [
    "PartResult",
    "check_output",
    "finish_parts",
    "part_name",
    "validate_writer_kwargs",
    "write_part",
]

_ATTEMPT = ".attempt-"
_ASIDE = ".replaced-"


def part_name(index: int) -> str:
    """The directory name of partition ``index``: ``00007``."""
    return f"{index:05d}"


@dataclass(frozen=True)
class PartResult:
    """What a task reports to the driver: partition number, samples written, its index URL."""

    index: int
    samples: int
    index_url: str


def _join(base: str, name: str) -> str:
    return f"{base.rstrip('/')}/{name}" if "://" in base else os.path.join(base, name)


def _remote_is_empty(url: str) -> bool:
    from astream import bridge
    from astream.storage.registry import open_store

    async def probe() -> bool:
        store = open_store(url)
        try:
            async for _ in store.list():
                return False
            return True
        finally:
            await store.aclose()

    empty: bool = bridge.run(probe())
    return empty


def check_output(out: Any, exist_ok: bool) -> tuple[str | None, str | None]:
    """Refuse a non-empty output unless ``exist_ok``; with it, empty a local output.

    Returns ``(local, remote)`` as :func:`~astream.writer.output.split_out` does."""
    local, remote = split_out(out)
    if remote is not None and not exist_ok and not _remote_is_empty(remote):
        raise OutputExistsError(
            f"out: {remote!r} is not empty; pass exist_ok=True in mds_kwargs to overwrite it"
        )
    if local is not None and os.path.isdir(local) and os.listdir(local):
        if remote is None and not exist_ok:
            raise OutputExistsError(
                f"out: directory {local!r} is not empty; pass exist_ok=True in mds_kwargs "
                "to overwrite it"
            )
        shutil.rmtree(local)
    elif local is not None and os.path.exists(local) and not os.path.isdir(local):
        raise ConfigError(f"out: {local!r} exists and is not a directory")
    if local is not None:
        os.makedirs(local, exist_ok=True)
    return local, remote


def validate_writer_kwargs(kwargs: Mapping[str, Any]) -> None:
    """Build (and discard) an MDSWriter with ``kwargs`` on a temp dir: every bad argument
    (columns, compression, hashes, size_limit, unknown names) fails here, before any job."""
    tmp = tempfile.mkdtemp(prefix="astream-check-")
    try:
        w = MDSWriter(**{**kwargs, "out": os.path.join(tmp, "x")})
        w._close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _publish_local(tmp: str, final: str, attempt: str) -> None:
    if os.path.exists(final):
        aside = f"{os.path.dirname(final)}/.{os.path.basename(final)}{_ASIDE}{attempt}"
        os.rename(final, aside)
        shutil.rmtree(aside, ignore_errors=True)
    os.rename(tmp, final)


def write_part(
    samples: Iterable[Mapping[str, Any]],
    out: Any,
    index: int,
    writer_kwargs: Mapping[str, Any],
    attempt: str | None = None,
) -> PartResult:
    """Write one partition's samples as the sub-dataset ``out/<part_name(index)>``.

    ``writer_kwargs``: MDSWriter arguments other than ``out``. ``attempt``: a name unique to
    this attempt (the engine's attempt id; a random one by default)."""
    attempt = attempt or uuid.uuid4().hex[:12]
    name = part_name(index)
    local, remote = split_out(out)
    kwargs = {k: v for k, v in writer_kwargs.items() if k not in ("out", "exist_ok")}
    keep_local = bool(kwargs.pop("keep_local", False))
    scratch_root = local
    own_scratch = scratch_root is None
    if scratch_root is None:
        scratch_root = tempfile.mkdtemp(prefix="astream-part-")
    os.makedirs(scratch_root, exist_ok=True)
    tmp = os.path.join(scratch_root, f".{name}{_ATTEMPT}{attempt}")
    target: Any = tmp if remote is None else (tmp, _join(remote, name))
    count = 0
    try:
        with MDSWriter(out=target, keep_local=True, exist_ok=True, **kwargs) as w:
            for sample in samples:
                w.write(sample)
                count += 1
        if remote is None or (keep_local and not own_scratch):
            assert local is not None
            _publish_local(tmp, os.path.join(local, name), attempt)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if own_scratch:
            shutil.rmtree(scratch_root, ignore_errors=True)
    index_base = remote if remote is not None else local
    assert index_base is not None
    return PartResult(index, count, _join(_join(index_base, name), INDEX_BASENAME))


def _drop_attempts(local: str) -> None:
    """Delete what killed attempts left behind (their hidden attempt directories)."""
    if not os.path.isdir(local):
        return
    for entry in os.listdir(local):
        if entry.startswith(".") and (_ATTEMPT in entry or _ASIDE in entry):
            shutil.rmtree(os.path.join(local, entry), ignore_errors=True)


def finish_parts(out: Any, results: Sequence[PartResult], merge: bool) -> list[int]:
    """Driver side: clean up dead attempts, merge the reported partitions in order.

    ``results``: one per partition (the engine's accepted attempts). Returns the sample count
    of each partition, in partition order."""
    from astream.writer.merge import merge_index

    by_index: dict[int, PartResult] = {}
    for r in results:
        if r.index in by_index:
            raise ConfigError(f"partition {r.index} was reported twice")
        by_index[r.index] = r
    ordered = [by_index[i] for i in sorted(by_index)]
    local, _ = split_out(out)
    if local is not None:
        _drop_attempts(local)
    if merge and ordered:
        merge_index([r.index_url for r in ordered], out)
    return [r.samples for r in ordered]
