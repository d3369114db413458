"""One shard of an index, as an object: the entry the reference's index.json holds per shard.

Theory of operation. :class:`ShardEntry` (with its :class:`FileInfo` files) is the validated,
immutable form of one element of ``index.json``'s ``shards`` list; ``to_json`` gives it back
in the reference writer's layout. Large indexes do not keep one of these per shard: they keep
columns (:mod:`astream.core.shard_table`) and build an entry when asked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["FileInfo", "ShardEntry"]


@dataclass(frozen=True)
class FileInfo:
    """One file of a shard: basename (relative to the dataset dir), size, hex digests."""

    basename: str
    bytes: int
    hashes: dict[str, str]

    def to_json(self) -> dict[str, Any]:
        return {"basename": self.basename, "bytes": self.bytes, "hashes": dict(self.hashes)}


@dataclass(frozen=True)
class ShardEntry:
    """One shard as the index describes it."""

    format: str
    column_encodings: list[str]
    column_names: list[str]
    column_sizes: list[int | None]
    compression: str | None
    hashes: list[str]
    raw_data: FileInfo
    zip_data: FileInfo | None
    samples: int
    size_limit: int | None
    version: int = 2
    raw_meta: FileInfo | None = None
    zip_meta: FileInfo | None = None
    newline: str | None = None
    separator: str | None = None
    columns: dict[str, str] | None = None

    @property
    def remote_basename(self) -> str:
        """The data file that exists in storage: the zip one if compressed, else the raw one."""
        return self.zip_data.basename if self.zip_data is not None else self.raw_data.basename

    @property
    def remote_meta_basename(self) -> str | None:
        """Split formats only: the meta file that exists in storage."""
        if self.zip_meta is not None:
            return self.zip_meta.basename
        return self.raw_meta.basename if self.raw_meta is not None else None

    def config(self) -> dict[str, Any]:
        """The shard config (entry minus file infos and sample count), as the reference has it."""
        obj = self.to_json()
        for key in ("raw_data", "zip_data", "raw_meta", "zip_meta", "samples"):
            obj.pop(key, None)
        return obj

    def to_json(self) -> dict[str, Any]:
        obj: dict[str, Any] = {
            "compression": self.compression,
            "format": self.format,
            "hashes": list(self.hashes),
            "raw_data": self.raw_data.to_json(),
            "samples": self.samples,
            "size_limit": self.size_limit,
            "version": self.version,
            "zip_data": self.zip_data.to_json() if self.zip_data else None,
        }
        if self.format == "mds":
            obj["column_encodings"] = list(self.column_encodings)
            obj["column_names"] = list(self.column_names)
            obj["column_sizes"] = list(self.column_sizes)
        else:
            obj["raw_meta"] = self.raw_meta.to_json() if self.raw_meta else None
            obj["zip_meta"] = self.zip_meta.to_json() if self.zip_meta else None
            obj["newline"] = self.newline
            if self.format == "json":
                obj["columns"] = dict(self.columns or {})
            else:
                obj["column_encodings"] = list(self.column_encodings)
                obj["column_names"] = list(self.column_names)
            if self.format == "xsv":
                obj["separator"] = self.separator
        return dict(sorted(obj.items()))
