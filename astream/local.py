"""LocalDataset: a map-style reader over an MDS dataset that is entirely on local disk.

Theory of operation. The index is parsed and validated once. Samples have global ids in shard
order; ``starts`` holds each shard's first id, and a lookup is one ``bisect``. Shards open
lazily, on first touch:

- an uncompressed shard file (or a raw file a cache left next to the zip) is memory-mapped and
  wrapped in a ``ShardView``: reading a sample is a slice of the map, no copy, no syscall;
- a compressed-only shard is read and decompressed in memory (bounded by the expected size from
  the index) and kept in a small LRU bounded by ``cache_bytes``.

Each shard gets a ``SampleDecoder`` built once per column layout (shared between shards with
the same layout); ``pkl`` columns are refused at construction unless ``allow_unsafe_types``.
The object pickles without its open maps, so it can be handed to DataLoader workers.
"""

from __future__ import annotations

import mmap
import os
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from astream.core.compression import decompress
from astream.core.index import INDEX_BASENAME, FileInfo, ShardEntry, parse_index
from astream.core.shard import SampleDecoder, ShardView
from astream.core.splitformats import SplitShardView
from astream.errors import ConfigError, FormatError, ObjectNotFoundError

__all__ = ["LocalDataset"]

_View = ShardView | SplitShardView


class LocalDataset:
    """Random access to a local MDS (or json/csv/tsv/xsv) dataset: ``ds[i]``, ``len(ds)``."""

    def __init__(
        self,
        local: str,
        split: str | None = None,
        allow_unsafe_types: bool = False,
        cache_bytes: int = 1 << 29,
    ) -> None:
        self.local = os.fspath(local)
        self.split = split or ""
        self.allow_unsafe_types = allow_unsafe_types
        self.cache_bytes = cache_bytes
        self.dirname = os.path.join(self.local, self.split)
        path = os.path.join(self.dirname, INDEX_BASENAME)
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            raise ObjectNotFoundError("no index.json", path) from None
        self.index = parse_index(raw, path)
        self.shards: Sequence[ShardEntry] = self.index.shards
        counts = self.index.sample_counts()
        self._starts: list[int] = [0, *np.cumsum(counts).tolist()]
        self.num_samples = self._starts[-1]
        self._reset()

    def _reset(self) -> None:
        layouts: dict[tuple[Any, ...], SampleDecoder] = {}
        self._decoders: list[SampleDecoder | None] = []
        for s in self.shards:
            if s.format != "mds":
                self._decoders.append(None)
                continue
            key = (tuple(s.column_names), tuple(s.column_encodings), tuple(s.column_sizes))
            if key not in layouts:
                layouts[key] = SampleDecoder(s, self.allow_unsafe_types, self._path(s.raw_data))
            self._decoders.append(layouts[key])
        self._views: list[_View | None] = [None] * len(self.shards)
        self._lru: OrderedDict[int, int] = OrderedDict()
        self._lru_bytes = 0

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for key in ("_views", "_lru", "_lru_bytes", "_decoders"):
            state.pop(key)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    def _path(self, info: FileInfo) -> str:
        return os.path.join(self.dirname, info.basename)

    def _load(self, raw: FileInfo, zip_: FileInfo | None, compression: str | None) -> Any:
        """Buffer of one uncompressed file: an mmap of the raw file, or a decompressed zip."""
        path = self._path(raw)
        if os.path.isfile(path) and os.path.getsize(path) == raw.bytes and raw.bytes > 0:
            with open(path, "rb") as f:
                return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        if zip_ is None:
            if os.path.isfile(path):
                size = os.path.getsize(path)
                raise FormatError(
                    f"shard is {size} bytes, index says {raw.bytes}"
                    + (" (truncated)" if size < raw.bytes else ""),
                    path,
                )
            raise ObjectNotFoundError("shard file missing", path)
        zpath = self._path(zip_)
        try:
            with open(zpath, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise ObjectNotFoundError("shard file missing", zpath) from None
        return decompress(compression, data, raw.bytes, zpath)

    def _view(self, k: int) -> _View:
        view = self._views[k]
        if view is not None:
            if k in self._lru:
                self._lru.move_to_end(k)
            return view
        s = self.shards[k]
        data = self._load(s.raw_data, s.zip_data, s.compression)
        source = self._path(s.zip_data or s.raw_data)
        if s.format == "mds":
            view = ShardView(data, s, source)
        else:
            assert s.raw_meta is not None
            meta = self._load(s.raw_meta, s.zip_meta, s.compression)
            meta_source = self._path(s.zip_meta or s.raw_meta)
            view = SplitShardView(data, meta, s, source, meta_source)
        self._views[k] = view
        if not isinstance(data, mmap.mmap):
            self._lru[k] = s.raw_data.bytes
            self._lru_bytes += s.raw_data.bytes
            while self._lru_bytes > self.cache_bytes and len(self._lru) > 1:
                old, size = self._lru.popitem(last=False)
                self._views[old] = None
                self._lru_bytes -= size
        return view

    def __len__(self) -> int:
        return self.num_samples

    @property
    def size(self) -> int:
        return self.num_samples

    def _sample(self, k: int, j: int) -> dict[str, Any]:
        view = self._view(k)
        dec = self._decoders[k]
        if dec is None:
            assert isinstance(view, SplitShardView)
            return view.sample(j)
        return dec.decode(view.sample_bytes(j))

    def get_item(self, idx: int) -> dict[str, Any]:
        """Sample by global id (negative ids count from the end)."""
        n = self.num_samples
        if idx < 0:
            idx += n
        if not 0 <= idx < n:
            raise IndexError(f"sample index {idx} out of range for {n} samples")
        k = bisect_right(self._starts, idx) - 1
        return self._sample(k, idx - self._starts[k])

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
            return self.get_item(int(key))
        if isinstance(key, slice):
            return [self.get_item(i) for i in range(*key.indices(self.num_samples))]
        if isinstance(key, np.ndarray):
            if key.dtype.kind not in "iu" or key.ndim != 1:
                raise ConfigError(f"index array must be 1-d integers, got {key.dtype} {key.shape}")
            return [self.get_item(int(i)) for i in key.tolist()]
        if isinstance(key, (list, tuple)):
            return [self[i] for i in key]
        raise TypeError(f"LocalDataset indices must be int, slice, list or array, not {key!r}")

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for k, s in enumerate(self.shards):
            for j in range(s.samples):
                yield self._sample(k, j)
