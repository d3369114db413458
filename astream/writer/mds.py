"""MDSWriter: samples in, MDS shards and index.json out, byte-identical to the reference.

Theory of operation. Each ``write`` encodes the sample at once (so a bad value fails at the
call that passed it) and appends it to the pending shard. Sizing follows the reference exactly:
a shard's running size starts at ``8 + len(config JSON)`` and each sample adds ``len + 4``; the
pending shard is flushed before a sample that would push it past ``size_limit``. Unlike the
reference, a shard is never flushed empty (a first sample larger than the limit gets a shard
of its own instead of following a 0-sample shard).

Flushing builds the shard, hashes the raw bytes, compresses and hashes again, and writes only
the file that belongs in storage (the compressed one when compressing), atomically: bytes go to
a hidden temp name in the same directory and are renamed into place, so a crash never leaves a
complete-looking file (files get the umask's mode; a full disk is an error naming the file and
the bytes it needed: ``writer/output.py``). The finished file is then handed to the sink (see
``writer/sink.py``): ``LocalSink`` for a local ``out``; for a remote ``out`` the storage
layer's sink, which uploads concurrently while writing goes on. ``finish`` flushes, writes
index.json (same atomic rename) and lets the sink ship it last.

``exist_ok`` rules a remote ``out`` as it rules a local one: a non-empty prefix is refused
without it, replaced with it, and every upload is a conditional write, so that two writers on
one prefix never publish a mix (``writer/publish.py``); the check runs in the constructor.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any

from astream.core import compression as _comp
from astream.core.hashing import hexdigest, validate_hash
from astream.core.index import INDEX_BASENAME, FileInfo, Index, ShardEntry, dump_index
from astream.core.shard import SampleEncoder, build_shard
from astream.core.sizes import parse_size
from astream.errors import ConfigError, OutputExistsError
from astream.writer.output import make_dirs, split_out, write_atomic
from astream.writer.sink import LocalSink, ShardSink

_log = logging.getLogger(__name__)

__all__ = ["MDSWriter", "ShardWriter"]

SinkFactory = Callable[[str, str, bool], ShardSink]
_KNOWN_KWARGS = {"retry"}
MAX_UPLOAD_WORKERS = 256  # max_workers: concurrent shard uploads (each holds a shard in memory)


def _remote_sink(remote: str, local: str, keep_local: bool, extra: dict[str, Any]) -> ShardSink:
    try:
        from astream.writer.remote import make_sink  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        raise ConfigError("remote output needs the storage layer") from None
    params = inspect.signature(make_sink).parameters
    kw = {k: v for k, v in extra.items() if k in params}
    sink: ShardSink = make_sink(remote, local, keep_local, **kw)
    return sink


class ShardWriter:
    """What every writer shares: ``out`` (local, remote or both), compression, hashes,
    ``size_limit``, the sink, the shard list, ``finish``/context manager, and the progress bar.
    A format defines ``_flush`` (build and hand over the pending shard) and ``get_config``."""

    format = ""

    def _open_output(
        self,
        *,
        out: Any,
        compression: str | None,
        hashes: Sequence[str] | None,
        size_limit: int | str | None,
        keep_local: bool,
        exist_ok: bool,
        progress_bar: bool,
        max_workers: int | None,
        retry: Any,
        sink_factory: SinkFactory | None,
    ) -> None:
        self.compression = _comp.validate_compression(compression or None)
        if isinstance(hashes, str):
            raise ConfigError(f"hashes must be a list of names, got the string {hashes!r}")
        self.hashes = sorted({validate_hash(h) for h in hashes or []})
        limit = None
        if size_limit:
            limit = parse_size(size_limit, "size_limit")
            if limit < 0 or limit >= 1 << 32:
                raise ConfigError(
                    f"`size_limit` must be less than 2**32 and not negative (u32 offsets), "
                    f"got {limit}"
                )
        self.size_limit = limit or None
        if max_workers is not None and (
            isinstance(max_workers, bool)
            or not isinstance(max_workers, int)
            or not 1 <= max_workers <= MAX_UPLOAD_WORKERS
        ):
            raise ConfigError(
                f"max_workers (concurrent uploads) must be an int in "
                f"1..{MAX_UPLOAD_WORKERS}, got {max_workers!r}"
            )
        if not isinstance(progress_bar, bool):
            raise ConfigError(f"progress_bar must be True or False, got {progress_bar!r}")
        if retry is not None:
            _retry_policy(retry)  # checked for a local output too, where it is unused
        self.keep_local = keep_local
        local, remote = split_out(out)
        self.remote = remote
        self._own_tmp = local is None
        self.local = local if local is not None else tempfile.mkdtemp(prefix="astream-writer-")
        self._sink_factory = sink_factory
        try:
            self._prepare_dir(self.local, exist_ok)
            self._sink = self._make_sink(remote, keep_local, exist_ok, max_workers, retry)
        except BaseException:
            if self._own_tmp:
                shutil.rmtree(self.local, ignore_errors=True)
            raise
        self._shards: list[ShardEntry] = []
        self._pending: list[bytes] = []
        self._closed = False
        self._bar: Any = None
        if progress_bar:
            from tqdm import tqdm

            self._bar = tqdm(desc=f"{type(self).__name__} {out}", unit=" samples")

    def _make_sink(
        self,
        remote: str | None,
        keep_local: bool,
        exist_ok: bool,
        max_workers: int | None,
        retry: Any,
    ) -> ShardSink:
        """The sink for ``out``; a remote one is prepared (its prefix checked) now."""
        if remote is None:
            return LocalSink()
        if self._sink_factory is not None:
            sink = self._sink_factory(remote, self.local, keep_local)
        else:
            extra: dict[str, Any] = {"exist_ok": exist_ok}
            if max_workers is not None:
                extra["max_concurrency"] = max_workers
            if retry is not None:
                extra["retry"] = _retry_policy(retry)
            sink = _remote_sink(remote, self.local, keep_local, extra)
        prepare = getattr(sink, "prepare", None)
        if prepare is not None:
            try:
                prepare()
            except BaseException:
                sink.close()
                raise
        return sink

    @staticmethod
    def _prepare_dir(local: str, exist_ok: bool) -> None:
        if os.path.isdir(local) and os.listdir(local):
            if not exist_ok:
                raise OutputExistsError(
                    f"out: {local!r}: Directory is not empty; pass exist_ok=True to overwrite it"
                )
            _log.warning("out: directory %r is not empty; exist_ok=True: removing it", local)
            shutil.rmtree(local)
        elif os.path.exists(local) and not os.path.isdir(local):
            raise ConfigError(f"out: {local!r} exists and is not a directory")
        make_dirs(local)

    def get_config(self) -> dict[str, Any]:
        raise NotImplementedError

    def _flush(self) -> None:
        raise NotImplementedError

    @property
    def shards(self) -> list[ShardEntry]:
        return list(self._shards)

    def _hash(self, data: bytes, basename: str) -> FileInfo:
        return FileInfo(basename, len(data), {a: hexdigest(a, data) for a in self.hashes})

    def _put(self, raw: bytes, raw_name: str) -> tuple[FileInfo, FileInfo | None, str, str]:
        """Hash ``raw``, compress and hash again if compressing, and write the file that belongs
        in storage atomically; (raw info, compressed info, its path, its name)."""
        raw_info = self._hash(raw, raw_name)
        zip_info = None
        data, name = raw, raw_name
        if self.compression is not None:
            name = f"{raw_name}.{_comp.extension(self.compression)}"
            data = _comp.compress(self.compression, raw)
            zip_info = self._hash(data, name)
        path = os.path.join(self.local, name)
        write_atomic(path, data)
        return raw_info, zip_info, path, name

    def _flushed(self, samples: int) -> None:
        """A shard of ``samples`` was handed to the sink: count it on the progress bar."""
        if self._bar is not None:
            self._bar.update(samples)
            self._bar.set_postfix(shards=len(self._shards), refresh=False)

    def finish(self) -> None:
        """Flush the last shard, write index.json, and wait for the sink to ship everything."""
        if self._closed:
            return
        try:
            self._flush()
            index_path = os.path.join(self.local, INDEX_BASENAME)
            write_atomic(index_path, dump_index(Index(self._shards)))
            self._sink.finish(index_path)
        finally:
            self._close()

    def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self._bar is not None:
                self._bar.close()
            self._sink.close()
        finally:
            if self._own_tmp and not self.keep_local:
                shutil.rmtree(self.local, ignore_errors=True)

    def __enter__(self) -> Any:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.finish()
        else:
            self._close()


def _retry_policy(retry: Any) -> Any:
    """The reference's ``retry`` (an int: retries after the first try) as a RetryPolicy."""
    from astream.storage.retry import RetryPolicy

    if isinstance(retry, RetryPolicy):
        return retry
    # the bound of download_retry: past 100 tries a store is down, not flaky
    if isinstance(retry, bool) or not isinstance(retry, int) or not 0 <= retry <= 100:
        raise ConfigError(f"retry must be an int in 0..100 or a RetryPolicy, got {retry!r}")
    return RetryPolicy(attempts=retry + 1)


class MDSWriter(ShardWriter):
    """Write an MDS dataset. Parameters and semantics follow ``streaming.MDSWriter``.

    ``columns``: name -> encoding. ``out``: local dir, remote URL, or (local, remote).
    ``compression``: ``None`` or ``name[:level]``. ``hashes``: algorithm names.
    ``size_limit``: bytes or a size string (``"64mb"``); ``None``/0 = one shard.
    ``exist_ok``: a non-empty local dir or remote prefix is an error unless True, which
    replaces it (``writer/publish.py``).
    ``sink_factory(remote, local, keep_local)`` overrides the remote upload sink.
    """

    format = "mds"

    def __init__(
        self,
        *,
        columns: Mapping[str, str],
        out: Any,
        compression: str | None = None,
        hashes: Sequence[str] | None = None,
        size_limit: int | str | None = 1 << 26,
        keep_local: bool = False,
        progress_bar: bool = False,
        max_workers: int | None = None,
        exist_ok: bool = False,
        sink_factory: SinkFactory | None = None,
        **kwargs: Any,
    ) -> None:
        unknown = sorted(set(kwargs) - _KNOWN_KWARGS)
        if unknown:
            raise ConfigError(
                f"Invalid Writer argument(s) for MDSWriter: {unknown} (unknown argument names)"
            )
        self._encoder = SampleEncoder(columns)
        self._open_output(
            out=out,
            compression=compression,
            hashes=hashes,
            size_limit=size_limit,
            keep_local=keep_local,
            exist_ok=exist_ok,
            progress_bar=progress_bar,
            max_workers=max_workers,
            retry=kwargs.get("retry"),
            sink_factory=sink_factory,
        )
        config = {
            "column_encodings": self._encoder.encodings,
            "column_names": self._encoder.names,
            "column_sizes": self._encoder.sizes,
            "compression": self.compression,
            "format": self.format,
            "hashes": self.hashes,
            "size_limit": self.size_limit,
            "version": 2,
        }
        self._config = config
        self._config_json = json.dumps(config, sort_keys=True).encode("utf-8")
        self._pending_size = 8 + len(self._config_json)

    def get_config(self) -> dict[str, Any]:
        """The shard-writing configuration: what the reference's ``get_config`` returns, keys
        in its order (the shard's config JSON is this, with sorted keys)."""
        return {
            "version": 2,
            "format": self.format,
            "compression": self.compression,
            "hashes": list(self.hashes),
            "size_limit": self.size_limit,
            "column_names": list(self._encoder.names),
            "column_encodings": list(self._encoder.encodings),
            "column_sizes": list(self._encoder.sizes),
        }

    def write(self, sample: Mapping[str, Any]) -> None:
        """Encode one sample; may first flush the pending shard if this one would overflow it."""
        if self._closed:
            raise ConfigError("MDSWriter: write() after finish()")
        self._sink.check()
        data = self._encoder.encode(sample)
        size = len(data) + 4
        limit = self.size_limit
        if limit is not None and self._pending and self._pending_size + size > limit:
            self._flush()
        self._pending.append(data)
        self._pending_size += size

    def _flush(self) -> None:
        if not self._pending:
            return
        raw_name = f"shard.{len(self._shards):05d}.mds"
        raw = build_shard(self._pending, self._config_json)
        raw_info, zip_info, path, name = self._put(raw, raw_name)
        self._shards.append(
            ShardEntry(
                format=self.format,
                column_encodings=list(self._encoder.encodings),
                column_names=list(self._encoder.names),
                column_sizes=list(self._encoder.sizes),
                compression=self.compression,
                hashes=list(self.hashes),
                raw_data=raw_info,
                zip_data=zip_info,
                samples=len(self._pending),
                size_limit=self.size_limit,
            )
        )
        samples = len(self._pending)
        self._pending = []
        self._pending_size = 8 + len(self._config_json)
        self._sink.shard_done(path, name)
        self._flushed(samples)
