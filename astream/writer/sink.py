"""Where finished shard files go once the writer has closed them.

The writer builds every shard and the index in a local directory. A sink is told about each
finished file and may ship it elsewhere (an object store) concurrently while writing goes on.

Contract:
- ``prepare()``, optional: called once by the writer's constructor, before anything is written;
  a remote sink checks (and with ``exist_ok`` claims) its prefix there, so that a non-empty
  output is refused at once, as a local directory is.
- ``shard_done(path, key)`` is called once per finished file (a shard, or a split-format meta
  file), in order. It must not block on the upload; it may raise the error of an *earlier*
  failed upload (the writer calls it from ``write``, so a failure surfaces at the next write).
- ``check()`` raises the first upload error seen so far, if any, as the original exception.
- ``finish(index_path)`` waits for every pending upload, raises the first error if any, and only
  then ships ``index.json``. Nothing is uploaded after ``finish`` returns.
- ``close()`` releases resources; called after ``finish`` or when the writer is abandoned by an
  exception (pending uploads are cancelled then).
- ``remove_local`` says whether the writer may delete local files after upload
  (``keep_local=False``); the sink does the deleting because only it knows when a file is sent.
"""

from __future__ import annotations

from typing import Protocol


class ShardSink(Protocol):
    def shard_done(self, path: str, key: str) -> None: ...

    def check(self) -> None: ...

    def finish(self, index_path: str) -> None: ...

    def close(self) -> None: ...


class LocalSink:
    """The sink of a purely local dataset: files already are where they belong."""

    def shard_done(self, path: str, key: str) -> None:
        return None

    def check(self) -> None:
        return None

    def finish(self, index_path: str) -> None:
        return None

    def close(self) -> None:
        return None
