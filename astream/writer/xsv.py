"""JSONWriter, CSVWriter, TSVWriter, XSVWriter: the reference's split-file shard formats.

Theory of operation. A split shard is two files: a text data file with one line per sample
(for csv/tsv/xsv preceded by a header line of the column names), and a meta file
``u32 N | u32 offsets[N+1] | config JSON`` whose offsets index the data file (see
``astream/core/splitformats.py`` for the reader side). Both files are written, compressed and
hashed the same way, named ``shard.NNNNN.<fmt>`` and ``shard.NNNNN.<fmt>.meta`` (plus the
compression extension), and the index entry carries ``raw_data``/``zip_data`` and
``raw_meta``/``zip_meta`` plus the writer's config: byte for byte what the reference writes.

Sizing follows the reference: a shard's running size starts at 0 (neither the header line nor
the meta file counts) and each sample adds its encoded length; the pending shard is flushed
before a sample that would push it past ``size_limit``. As in ``MDSWriter``, a shard is never
flushed empty (the reference writes a 0-sample shard before a first sample larger than the
limit).

Encoding. json: ``json.dumps({column: value}, sort_keys=True) + newline`` with each value
checked against its column type (str, int or float, as ``isinstance`` says, like the
reference). xsv: values joined by the separator, ``str(value)`` for numbers; no quoting, so a
value holding the separator or the newline is refused (the reference asserts), and so is a
``bool`` in an int column, which the reference would write as ``True`` and then fail to read.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping, Sequence
from typing import Any

from astream.core.index import ShardEntry
from astream.errors import ConfigError, MissingColumnError, UnsupportedEncodingError
from astream.writer.mds import ShardWriter, SinkFactory

__all__ = ["CSVWriter", "JSONWriter", "SplitWriter", "TSVWriter", "XSVWriter"]

_TYPES: dict[str, type] = {"str": str, "int": int, "float": float}
_JSON_SPACE = frozenset(" \t\n\r")  # what json.loads skips after a value


def _columns(columns: Any, writer: str) -> dict[str, str]:
    if not isinstance(columns, Mapping) or not columns:
        raise ConfigError(f"{writer}: columns must be a non-empty dict of column name -> encoding")
    for name, enc in columns.items():
        if not isinstance(name, str):
            raise ConfigError(f"{writer}: columns: column name {name!r} is not a string")
        if enc not in _TYPES:
            raise UnsupportedEncodingError(
                f"{writer}: columns[{name!r}]: unknown encoding {enc!r} (expected one of "
                f"{sorted(_TYPES)})"
            )
    return dict(columns)


def _check_value(name: str, enc: str, value: Any) -> None:
    if not isinstance(value, _TYPES[enc]):
        raise ConfigError(
            f"column {name!r}: expected {enc}, got {type(value).__name__} {value!r:.60}"
        )


class SplitWriter(ShardWriter):
    """What the four split-format writers share: output, sizing, files, index, sink.

    Parameters as in the reference: ``out`` (local dir, remote URL, or (local, remote)),
    ``keep_local``, ``compression`` (``name[:level]``), ``hashes``, ``size_limit`` (bytes or a
    size string; ``None``/0 = one shard), ``exist_ok``, ``max_workers`` (concurrent uploads to a
    remote ``out``) and ``retry`` (upload retries). ``sink_factory(remote, local, keep_local)``
    overrides the remote upload sink.
    """

    format = ""

    def __init__(
        self,
        *,
        out: Any,
        newline: str = "\n",
        keep_local: bool = False,
        compression: str | None = None,
        hashes: Sequence[str] | None = None,
        size_limit: int | str | None = 1 << 26,
        exist_ok: bool = False,
        progress_bar: bool = False,
        max_workers: int | None = None,
        retry: Any = None,
        sink_factory: SinkFactory | None = None,
        **unknown: Any,
    ) -> None:
        who = type(self).__name__
        if unknown:
            raise ConfigError(
                f"Invalid Writer argument(s) for {who}: {sorted(unknown)} (unknown argument names)"
            )
        if not isinstance(newline, str):
            raise ConfigError(f"{who}: newline must be a string, got {newline!r}")
        self.newline = newline
        self._open_output(
            out=out,
            compression=compression,
            hashes=hashes,
            size_limit=size_limit,
            keep_local=keep_local,
            exist_ok=exist_ok,
            progress_bar=progress_bar,
            max_workers=max_workers,
            retry=retry,
            sink_factory=sink_factory,
        )
        self._pending_size = 0

    # -- what each format defines ---------------------------------------------------------------
    def encode_sample(self, sample: Mapping[str, Any]) -> bytes:
        raise NotImplementedError

    def get_config(self) -> dict[str, Any]:
        """The shard-writing configuration, keys in the reference's order."""
        return {
            "version": 2,
            "format": self.format,
            "compression": self.compression,
            "hashes": list(self.hashes),
            "size_limit": self.size_limit,
        }

    def _header(self) -> bytes:
        return b""

    def _entry_fields(self) -> dict[str, Any]:
        raise NotImplementedError

    # -- writing --------------------------------------------------------------------------------

    def write(self, sample: Mapping[str, Any]) -> None:
        """Encode one sample; may first flush the pending shard if this one would overflow it."""
        if self._closed:
            raise ConfigError(f"{type(self).__name__}: write() after finish()")
        self._sink.check()
        if not isinstance(sample, Mapping):
            raise ConfigError(f"sample must be a dict, got {type(sample).__name__}")
        data = self.encode_sample(sample)
        limit = self.size_limit
        if limit is not None and self._pending and self._pending_size + len(data) > limit:
            self._flush()
        self._pending.append(data)
        self._pending_size += len(data)

    def _flush(self) -> None:
        if not self._pending:
            return
        header = self._header()
        data = header + b"".join(self._pending)
        if len(data) >= 1 << 32:
            raise ConfigError(f"shard would be {len(data)} bytes; offsets are u32 (< 4 GiB)")
        offsets = [len(header)]
        for s in self._pending:
            offsets.append(offsets[-1] + len(s))
        config = json.dumps(self.get_config(), sort_keys=True).encode("utf-8")
        n = len(self._pending)
        meta = struct.pack(f"<{n + 2}I", n, *offsets) + config
        base = f"shard.{len(self._shards):05d}.{self.format}"
        raw_data, zip_data, data_path, data_name = self._put(data, base)
        raw_meta, zip_meta, meta_path, meta_name = self._put(meta, f"{base}.meta")
        self._shards.append(
            ShardEntry(
                compression=self.compression,
                hashes=list(self.hashes),
                raw_data=raw_data,
                zip_data=zip_data,
                raw_meta=raw_meta,
                zip_meta=zip_meta,
                samples=n,
                size_limit=self.size_limit,
                newline=self.newline,
                **self._entry_fields(),
            )
        )
        self._pending = []
        self._pending_size = 0
        self._sink.shard_done(data_path, data_name)
        self._sink.shard_done(meta_path, meta_name)
        self._flushed(n)


class JSONWriter(SplitWriter):
    """Write a JSON-lines dataset (``streaming.JSONWriter``): ``columns`` name -> str/int/float,
    ``newline`` between samples (JSON whitespace only, so that a JSON parser reads the line)."""

    format = "json"

    def __init__(self, *, columns: Mapping[str, str], out: Any, newline: str = "\n", **kw: Any):
        self.columns = _columns(columns, "JSONWriter")
        if not isinstance(newline, str) or not set(newline) <= _JSON_SPACE:
            raise ConfigError(
                f"JSONWriter: newline must be JSON whitespace (spaces, \\t, \\n, \\r), got "
                f"{newline!r}"
            )
        super().__init__(out=out, newline=newline, **kw)

    def encode_sample(self, sample: Mapping[str, Any]) -> bytes:
        obj: dict[str, Any] = {}
        for name, enc in self.columns.items():
            try:
                value = sample[name]
            except KeyError:
                raise MissingColumnError(f"sample is missing column {name!r}") from None
            _check_value(name, enc, value)
            obj[name] = value
        try:
            text = json.dumps(obj, sort_keys=True)
        except ValueError as exc:  # a str subclass that is not serialisable, etc.
            raise ConfigError(f"sample cannot be written as JSON ({exc})") from None
        return (text + self.newline).encode("utf-8")

    def get_config(self) -> dict[str, Any]:
        obj = super().get_config()
        obj.update({"columns": dict(self.columns), "newline": self.newline})
        return obj

    def _entry_fields(self) -> dict[str, Any]:
        names = sorted(self.columns)
        return {
            "format": "json",
            "columns": dict(self.columns),
            "column_names": names,
            "column_encodings": [self.columns[n] for n in names],
            "column_sizes": [None] * len(names),
        }


class XSVWriter(SplitWriter):
    """Write a separated-values dataset (``streaming.XSVWriter``): ``columns`` name ->
    str/int/float (stored in sorted name order), ``separator`` between values, ``newline``
    after each line. No quoting: a value holding the separator or the newline is refused."""

    format = "xsv"

    def __init__(
        self,
        *,
        columns: Mapping[str, str],
        separator: str,
        out: Any,
        newline: str = "\n",
        **kw: Any,
    ) -> None:
        who = type(self).__name__
        cols = _columns(columns, who)
        if not isinstance(separator, str) or not separator:
            raise ConfigError(f"{who}: separator must be a non-empty string, got {separator!r}")
        if not isinstance(newline, str) or not newline:
            raise ConfigError(f"{who}: newline must be a non-empty string, got {newline!r}")
        if separator in newline or newline in separator:
            raise ConfigError(
                f"{who}: separator {separator!r} and newline {newline!r} overlap; lines could "
                "not be split"
            )
        for name in cols:
            if separator in name or newline in name:
                raise ConfigError(
                    f"{who}: column name {name!r} contains the separator or the newline"
                )
        self.columns = cols
        self.column_names = sorted(cols)
        self.column_encodings = [cols[n] for n in self.column_names]
        self.separator = separator
        super().__init__(out=out, newline=newline, **kw)

    def encode_sample(self, sample: Mapping[str, Any]) -> bytes:
        sep, nl = self.separator, self.newline
        parts: list[str] = []
        for name, enc in zip(self.column_names, self.column_encodings):
            try:
                value = sample[name]
            except KeyError:
                raise MissingColumnError(f"sample is missing column {name!r}") from None
            _check_value(name, enc, value)
            if enc == "int" and isinstance(value, bool):
                raise ConfigError(
                    f"column {name!r}: expected int, got bool {value!r} (it would not read back)"
                )
            text = value if enc == "str" else str(value)
            if sep in text or nl in text:
                raise ConfigError(
                    f"column {name!r}: value {text!r:.60} contains the separator {sep!r} or "
                    f"the newline {nl!r}"
                )
            parts.append(text)
        return (sep.join(parts) + nl).encode("utf-8")

    def _header(self) -> bytes:
        return (self.separator.join(self.column_names) + self.newline).encode("utf-8")

    def get_config(self) -> dict[str, Any]:
        obj = super().get_config()
        obj.update(
            {
                "column_names": list(self.column_names),
                "column_encodings": list(self.column_encodings),
                "separator": self.separator,
                "newline": self.newline,
            }
        )
        return obj

    def _entry_fields(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "column_names": list(self.column_names),
            "column_encodings": list(self.column_encodings),
            "column_sizes": [None] * len(self.column_names),
            "separator": self.separator if self.format == "xsv" else None,
        }


class CSVWriter(XSVWriter):
    """Write a comma-separated dataset (``streaming.CSVWriter``); see :class:`XSVWriter`."""

    format = "csv"

    def __init__(self, *, columns: Mapping[str, str], out: Any, newline: str = "\n", **kw: Any):
        if "separator" in kw:
            raise ConfigError("CSVWriter: separator is always ','; use XSVWriter for another")
        super().__init__(columns=columns, separator=",", out=out, newline=newline, **kw)

    def get_config(self) -> dict[str, Any]:
        obj = super().get_config()
        del obj["separator"]
        return obj


class TSVWriter(XSVWriter):
    """Write a tab-separated dataset (``streaming.TSVWriter``); see :class:`XSVWriter`."""

    format = "tsv"

    def __init__(self, *, columns: Mapping[str, str], out: Any, newline: str = "\n", **kw: Any):
        if "separator" in kw:
            raise ConfigError("TSVWriter: separator is always a tab; use XSVWriter for another")
        super().__init__(columns=columns, separator="\t", out=out, newline=newline, **kw)

    def get_config(self) -> dict[str, Any]:
        obj = super().get_config()
        del obj["separator"]
        return obj
