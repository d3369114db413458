"""The dataset's shards, resolved: where each lives remotely, where it goes locally, which
global sample ids it holds.

Theory of operation
-------------------
Streams are concatenated in order: stream ``k``'s samples get global ids starting at the sum of
the earlier streams' sample counts, and its shards follow the earlier streams' shards. A global
sample id maps to (shard, index in shard) with one binary search over ``starts`` (the first id
of every shard), vectorised for a whole batch.

A stream whose index was read in place from an unbound local copy (``index_load.py``) is
local-only: no remote to fetch from, never evicted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar, overload

import numpy as np

from astream.core.index import Index, ShardEntry
from astream.errors import ConfigError, EmptyDatasetError, FormatError
from astream.runtime.binding import hold_leases
from astream.runtime.cache import ShardFiles
from astream.runtime.fetch import RemoteShard
from astream.runtime.index_load import local_copy

__all__ = ["Catalog", "StreamSource", "check_hash_available"]

_T = TypeVar("_T")


@dataclass(frozen=True)
class StreamSource:
    """One stream, resolved: remote root (split included) or None, local dir, parsed index,
    and the download settings in force for it (the Stream's own, else the dataset's).
    ``keep_zip`` None: the engine's (the dataset's) applies."""

    remote: str | None
    local: str
    index: Index
    download_retry: int = 2
    download_timeout: float = 60.0
    validate_hash: str | None = None
    keep_zip: bool | None = None


def _no_samples(sources: list[StreamSource]) -> str:
    """The error text for a dataset without samples: it names each stream's local directory
    (the reference names the first empty stream's index file; its check stops there)."""
    where = ", ".join(repr(s.local) for s in sources)
    return f"Stream contains no samples: {where} (every shard is empty)"


class Catalog:
    """Every shard of every stream, in global order.

    Shard tables stay columns: ``entries[s]`` and ``shards[s]`` (the fetch description) are
    built when asked, and a shard's fetch description is kept once built (only the shards a
    process touches ever get one)."""

    def __init__(self, sources: list[StreamSource]) -> None:
        if not sources:
            raise ConfigError("a dataset needs at least one stream")
        # a complete local copy read in place (its remote's index unreadable): local-only data
        sources = [replace(src, remote=None) if local_copy(src.index) else src for src in sources]
        self.sources = sources
        tables = [src.index.table for src in sources]
        self.stream_sizes: list[np.ndarray[Any, np.dtype[np.int64]]] = [
            t.samples.copy() for t in tables
        ]
        self.shard_first = np.zeros(len(sources) + 1, dtype=np.int64)  # first shard per stream
        np.cumsum([len(t) for t in tables], out=self.shard_first[1:])
        self.shard_stream = np.repeat(
            np.arange(len(sources), dtype=np.int32), [len(t) for t in tables]
        )
        self.entries = _Entries(self)
        self.shards = _Shards(self)
        counts = np.concatenate(self.stream_sizes)
        self.starts = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=self.starts[1:])
        self.num_samples = int(self.starts[-1])
        if self.num_samples == 0:
            raise EmptyDatasetError(_no_samples(sources))
        firsts = [0]
        for sizes in self.stream_sizes:
            firsts.append(firsts[-1] + int(sizes.sum()))
        self.stream_starts = firsts
        self.max_footprint = max(int(t.footprints().max(initial=0)) for t in tables)
        # this process uses these cache directories for as long as the catalog lives
        hold_leases(self, [s.local for s in sources])

    def stream_of(self, s: int) -> tuple[int, int]:
        """(stream, shard within the stream) of global shard ``s``."""
        k = int(self.shard_stream[s])
        return k, s - int(self.shard_first[k])

    def files(self) -> list[ShardFiles]:
        """Every file the cache may hold: each shard's, and each split shard's meta file."""
        shards = [self.shards[s] for s in range(len(self.shards))]
        out = [s.files for s in shards]
        out.extend(s.meta.files for s in shards if s.meta is not None)
        return out

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


class _Global(Sequence[_T]):
    """Global shard numbers over the streams' tables, built on demand."""

    def __init__(self, catalog: Catalog) -> None:
        # the pieces, not the catalog: no reference cycle, so a dropped dataset frees its
        # catalog (and the cache leases it holds) at once, not at the next collection
        self.sources = catalog.sources
        self.shard_stream = catalog.shard_stream
        self.shard_first = catalog.shard_first

    def __len__(self) -> int:
        return len(self.shard_stream)

    def stream_of(self, s: int) -> tuple[int, int]:
        k = int(self.shard_stream[s])
        return k, s - int(self.shard_first[k])

    @overload
    def __getitem__(self, s: int) -> _T: ...

    @overload
    def __getitem__(self, s: slice) -> list[_T]: ...

    def __getitem__(self, s: int | slice) -> _T | list[_T]:
        if isinstance(s, slice):
            return [self.one(j) for j in range(*s.indices(len(self)))]
        n = len(self)
        j = int(s) + n if int(s) < 0 else int(s)
        if not 0 <= j < n:
            raise IndexError(f"shard {s} out of range for {n} shards")
        return self.one(j)

    def one(self, s: int) -> _T:
        raise NotImplementedError


class _Entries(_Global[ShardEntry]):
    def one(self, s: int) -> ShardEntry:
        k, i = self.stream_of(s)
        return self.sources[k].index.shards[i]


class _Shards(_Global[RemoteShard]):
    def __init__(self, catalog: Catalog) -> None:
        super().__init__(catalog)
        self._built: dict[int, RemoteShard] = {}

    def one(self, s: int) -> RemoteShard:
        got = self._built.get(s)
        if got is None:
            k, i = self.stream_of(s)
            src = self.sources[k]
            entry = src.index.shards[i]
            got = self._built[s] = _with_meta(entry, _remote_shard(src, entry))
        return got


def _remote_shard(src: StreamSource, entry: ShardEntry) -> RemoteShard:
    if entry.format == "parquet":  # a row group (virtual shard): parquet/io_rowgroup.py
        from astream.parquet.io_rowgroup import row_group_remote_shard

        rg: Any = entry
        return row_group_remote_shard(src.remote, src.local, rg, src.validate_hash, src.keep_zip)
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
        validate_hash=src.validate_hash,
        keep_zip=src.keep_zip,
    )


def _with_meta(entry: ShardEntry, data: RemoteShard) -> RemoteShard:
    """A split-format shard (json/csv/tsv/xsv: a data file and a meta file holding its sample
    offsets) is its data file with the meta file as a companion, which the fetcher brings
    first. The meta file is a cache file of its own (own locks, evicted on its own: a reader
    needs it only to learn the offsets, once per process)."""
    raw, zipm = entry.raw_meta, entry.zip_meta
    if raw is None:
        return data
    files = replace(
        data.files,
        raw=raw.basename,
        raw_size=raw.bytes,
        zip=zipm.basename if zipm is not None else None,
        zip_size=zipm.bytes if zipm is not None else None,
    )
    meta = replace(
        data,
        files=files,
        raw_key=raw.basename,
        zip_key=zipm.basename if zipm is not None else None,
        raw_hashes=dict(raw.hashes),
        zip_hashes=dict(zipm.hashes) if zipm is not None else {},
        meta=None,
    )
    return replace(data, meta=meta)


def check_hash_available(catalog: Catalog, algo: str) -> None:
    for k, src in enumerate(catalog.sources):
        want = src.validate_hash or algo  # a stream's own validate_hash overrides the dataset's
        for i, entry in src.index.table.configs():  # hash algorithms: one per configuration
            if want not in entry.hashes:
                raise FormatError(
                    f"validate_hash={want!r} but shard {i} of stream {k} lists hashes "
                    f"{entry.hashes}",
                    src.remote or src.local,
                )
