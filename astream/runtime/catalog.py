"""The dataset's shards, resolved: where each lives remotely, where it goes locally, which
global sample ids it holds.

Theory of operation
-------------------
Streams are concatenated in order: stream ``k``'s samples get global ids starting at the sum of
the earlier streams' sample counts, and its shards follow the earlier streams' shards. A global
sample id maps to (shard, index in shard) with one binary search over ``starts`` (the first id
of every shard), vectorised for a whole batch.

Index loading (:func:`load_index`) happens once per process that builds a dataset. With a remote
the remote ``index.json`` is always fetched (it is small) and compared with the local copy: when
they differ the local one is replaced atomically and cached shard files whose size no longer
matches the new index are deleted, so a dataset rewritten in place is never served stale.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from astream.core.index import Index, ShardEntry, parse_index
from astream.errors import ConfigError, EmptyDatasetError, FormatError, MissingIndexError
from astream.runtime.cache import ShardFiles
from astream.runtime.fetch import RemoteShard
from astream.storage.base import ObjectStore

__all__ = ["Catalog", "StreamSource", "load_index"]

INDEX = "index.json"


@dataclass(frozen=True)
class StreamSource:
    """One stream, resolved: remote root (split included) or None, local dir, parsed index."""

    remote: str | None
    local: str
    index: Index


class Catalog:
    """Every shard of every stream, in global order."""

    def __init__(self, sources: list[StreamSource]) -> None:
        if not sources:
            raise ConfigError("a dataset needs at least one stream")
        self.sources = sources
        self.entries: list[ShardEntry] = []
        self.shards: list[RemoteShard] = []
        self.shard_stream: list[int] = []
        counts: list[int] = []
        self.stream_sizes: list[np.ndarray[Any, np.dtype[np.int64]]] = []
        for k, src in enumerate(sources):
            sizes = src.index.sample_counts()
            self.stream_sizes.append(sizes)
            for entry in src.index.shards:
                if entry.format != "mds":
                    raise ConfigError(
                        f"stream {k} ({src.remote or src.local}): streaming {entry.format!r} "
                        "shards is not supported yet (MDS only); read it with LocalDataset"
                    )
                self.entries.append(entry)
                self.shards.append(_remote_shard(src, entry))
                self.shard_stream.append(k)
                counts.append(entry.samples)
        self.starts = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(np.asarray(counts, dtype=np.int64), out=self.starts[1:])
        self.num_samples = int(self.starts[-1])
        if self.num_samples == 0:
            raise EmptyDatasetError("the dataset has no samples (every shard is empty)")
        firsts = [0]
        for sizes in self.stream_sizes:
            firsts.append(firsts[-1] + int(sizes.sum()))
        self.stream_starts = firsts
        self.max_footprint = max(s.files.footprint() for s in self.shards)

    def files(self) -> list[ShardFiles]:
        return [s.files for s in self.shards]

    def locate(
        self, ids: np.ndarray[Any, np.dtype[np.int64]]
    ) -> tuple[np.ndarray[Any, np.dtype[np.intp]], np.ndarray[Any, np.dtype[np.int64]]]:
        """(shard index, index within shard) of every global sample id."""
        shard = np.searchsorted(self.starts, ids, side="right") - 1
        return shard, ids - self.starts[shard]

    def locate_one(self, i: int) -> tuple[int, int]:
        if not 0 <= i < self.num_samples:
            raise IndexError(f"sample index {i} out of range for {self.num_samples} samples")
        s = int(np.searchsorted(self.starts, i, side="right")) - 1
        return s, i - int(self.starts[s])


def _remote_shard(src: StreamSource, entry: ShardEntry) -> RemoteShard:
    raw = entry.raw_data
    zipd = entry.zip_data
    files = ShardFiles(
        root=src.local,
        raw=raw.basename,
        raw_size=raw.bytes,
        zip=zipd.basename if zipd is not None else None,
        zip_size=zipd.bytes if zipd is not None else None,
        # Local-only data is never evicted; a raw file decompressed from a local-only
        # compressed shard is a derived copy and may be, but never its compressed source.
        evictable=src.remote is not None or zipd is not None,
        zip_is_source=src.remote is None and zipd is not None,
    )
    return RemoteShard(
        files=files,
        remote=src.remote,
        raw_key=raw.basename,
        zip_key=zipd.basename if zipd is not None else None,
        compression=entry.compression,
        raw_hashes=dict(raw.hashes),
        zip_hashes=dict(zipd.hashes) if zipd is not None else {},
    )


async def load_index(store: ObjectStore | None, local: str) -> Index:
    """The stream's index, revalidated against the remote when there is one."""
    path = os.path.join(local, INDEX)
    if store is None:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise MissingIndexError(
                f"no {INDEX} at {path}: give `remote`, or point `local` at an MDS dataset"
            ) from None
        return parse_index(data, path)
    data = await store.get_range(INDEX)
    index = parse_index(data, store.url_for(INDEX))
    try:
        with open(path, "rb") as f:
            old = f.read()
    except FileNotFoundError:
        old = None
    if old != data:
        os.makedirs(local, exist_ok=True)
        if old is not None:
            _drop_stale(local, index)
        # the temporary copy lives under .astream/, which cache accounting never counts
        tmpdir = os.path.join(local, ".astream")
        os.makedirs(tmpdir, exist_ok=True)
        tmp = os.path.join(tmpdir, f"{INDEX}.{os.getpid()}")
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    return index


def _drop_stale(local: str, index: Index) -> None:
    """Delete cached shard files that no longer match the (new) index."""
    for entry in index.shards:
        for info in (entry.raw_data, entry.zip_data):
            if info is None:
                continue
            p = os.path.join(local, info.basename)
            try:
                if os.stat(p).st_size != info.bytes:
                    os.unlink(p)
            except FileNotFoundError:
                pass


def check_hash_available(catalog: Catalog, algo: str) -> None:
    for k, src in enumerate(catalog.sources):
        for i, entry in enumerate(src.index.shards):
            if algo not in entry.hashes:
                raise FormatError(
                    f"validate_hash={algo!r} but shard {i} of stream {k} lists hashes "
                    f"{entry.hashes}",
                    src.remote or src.local,
                )
