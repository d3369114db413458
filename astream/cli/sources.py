"""Readers for ``astream convert``: rows of JSONL, CSV, Parquet, a folder of files, or a
Hugging Face ``datasets`` directory written by ``save_to_disk``.

Theory of operation
-------------------
Every input is a :class:`Source`: ``count()`` rows, ``rows(start, stop)`` yields row dicts of a
contiguous range in input order, ``nbytes`` is the input size (for the MB/s figure). A source
is a small picklable object (paths only), so ``convert --workers N`` sends one to each worker
process, which reads its own range. Column encodings are inferred from the first rows
(:func:`infer_columns`) or given by the user; :func:`coercer` turns CSV strings into the
values the chosen encodings store.

A Hugging Face dataset saved to disk is read without the ``datasets`` package: its
``state.json`` lists Arrow IPC stream files, which pyarrow reads directly.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
from collections.abc import Callable, Iterator
from typing import Any

from astream.errors import ConfigError, FormatError

__all__ = ["Source", "coercer", "infer_columns", "open_source", "parse_columns"]

_TEXT_EXT = {".txt", ".md", ".json", ".csv", ".tsv", ".html", ".xml", ".py", ".jsonl"}
_IMAGE_ENC = {".jpg": "jpeg", ".jpeg": "jpeg", ".png": "png"}


class Source:
    kind = "?"

    def __init__(self, path: str) -> None:
        self.path = path
        self.nbytes = 0

    def count(self) -> int:
        raise NotImplementedError

    def rows(self, start: int, stop: int) -> Iterator[dict[str, Any]]:
        raise NotImplementedError

    def default_columns(self) -> dict[str, str] | None:
        """Columns the source fixes itself (a folder); None to infer from values."""
        return None

    def bounds(self, n: int) -> list[int]:
        """``n + 1`` row numbers cutting the rows into ``n`` contiguous non-empty ranges, one
        per worker (``n`` <= ``count()``)."""
        total = self.count()
        return [total * k // n for k in range(n + 1)]


class JsonlSource(Source):
    kind = "jsonl"

    def _lines(self) -> Iterator[tuple[int, str]]:
        # utf-8-sig: a byte-order mark some editors write is not part of the first line
        with _text_errors(self.path), open(self.path, encoding="utf-8-sig") as f:
            for lineno, line in enumerate(f, 1):
                if line.strip():
                    yield lineno, line

    def count(self) -> int:
        return sum(1 for _ in self._lines())

    def rows(self, start: int, stop: int) -> Iterator[dict[str, Any]]:
        for i, (lineno, line) in enumerate(self._lines()):
            if i >= stop:
                return
            if i < start:
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise FormatError(f"line {lineno}: not JSON ({exc.msg})", self.path) from None
            if not isinstance(row, dict):
                raise FormatError(f"line {lineno}: expected a JSON object", self.path)
            yield row


@contextlib.contextmanager
def _text_errors(path: str) -> Iterator[None]:
    """A text input that is not UTF-8 is a FormatError naming the file (the decoder reads
    ahead, so the line it fails on is not the line of the bad byte: none is named)."""
    try:
        yield
    except UnicodeDecodeError as exc:
        raise FormatError(
            f"not UTF-8 text (byte {exc.object[exc.start : exc.start + 1]!r}); re-encode it "
            "as UTF-8",
            path,
        ) from None


class CsvSource(Source):
    """Rows of a CSV (``.tsv``: tab-separated) file with a header line. Checked as read, each
    a FormatError naming the file and the line: a header name that repeats (its values would
    overwrite each other) or is empty, a row whose field count is not the header's. A UTF-8
    byte-order mark is dropped; blank lines are skipped. Line numbers are physical lines (a
    quoted field may span several)."""

    kind = "csv"

    def _records(self) -> Iterator[dict[str, Any]]:
        delim = "\t" if self.path.endswith(".tsv") else ","
        with _text_errors(self.path), open(self.path, encoding="utf-8-sig", newline="") as f:
            reader = csv.reader(f, delimiter=delim)
            line = 1  # first physical line of the record the reader returns next
            try:
                header: list[str] | None = None
                for fields in reader:
                    start, line = line, reader.line_num + 1
                    if not fields:
                        continue  # a blank line
                    if header is None:
                        header = self._header(fields, start)
                        continue
                    if len(fields) != len(header):
                        raise FormatError(
                            f"line {start}: {len(fields)} fields, but the header has {len(header)}",
                            self.path,
                        )
                    yield dict(zip(header, fields))
            except csv.Error as exc:
                raise FormatError(f"line {line}: not CSV ({exc})", self.path) from None

    def _header(self, names: list[str], line: int) -> list[str]:
        seen: set[str] = set()
        for k, name in enumerate(names, 1):
            if not name:
                raise FormatError(f"line {line}: column {k} of the header has no name", self.path)
            if name in seen:
                raise FormatError(
                    f"line {line}: column {name!r} appears twice in the header", self.path
                )
            seen.add(name)
        return names

    def count(self) -> int:
        return sum(1 for _ in self._records())

    def rows(self, start: int, stop: int) -> Iterator[dict[str, Any]]:
        for i, row in enumerate(self._records()):
            if i >= stop:
                return
            if i >= start:
                yield row


class ArrowBatches(Source):
    """Common part of Parquet and Hugging Face inputs: record batches in order."""

    def batches(self) -> Iterator[Any]:
        raise NotImplementedError

    def rows(self, start: int, stop: int) -> Iterator[dict[str, Any]]:
        pos = 0
        for batch in self.batches():
            n = batch.num_rows
            lo, hi = max(start - pos, 0), min(stop - pos, n)
            if lo < hi:
                yield from batch.slice(lo, hi - lo).to_pylist()
            pos += n
            if pos >= stop:
                return


def _pyarrow() -> Any:
    try:
        import pyarrow
    except ImportError:
        raise ConfigError(
            "Parquet and Hugging Face inputs need pyarrow: pip install 'astream[parquet]'"
        ) from None
    return pyarrow


class ParquetTableSource(ArrowBatches):
    """A table of ``*.parquet`` objects: a remote prefix (``s3://``, ``gs://``, ``azure://``...),
    one remote object, or a local directory. The footers are read by ranged GETs, concurrently,
    when the source opens (that gives ``count()`` without reading any data); ``rows`` then
    fetches only the row groups its range overlaps, each as ranged GETs of its column chunks,
    the next one while the current one is decoded. Picklable: a worker gets the footers too."""

    kind = "parquet"
    PREFETCH = 2  # row groups in flight while one is decoded

    def __init__(self, path: str, split: str | None = None, files: list[str] | None = None):
        super().__init__(path)
        self.split = split
        self.files = files
        self.table = self._read_table()
        self.nbytes = sum(f.size for f in self.table.files)

    def _open(self) -> Any:
        from astream.storage import open_store

        return open_store(self.path)

    def _read_table(self) -> Any:
        from astream import bridge
        from astream.parquet.io_index import build_table

        async def go() -> Any:
            store = self._open()
            try:
                table, _ = await build_table(store, files=self.files, split=self.split)
                return table
            finally:
                await store.aclose()

        return bridge.run(go())

    def count(self) -> int:
        return int(self.table.rows)

    def bounds(self, n: int) -> list[int]:
        """As ``Source.bounds``, each cut moved to the nearest row-group start, so that no
        row group is fetched by two workers (fewer ranges when there are fewer groups)."""
        starts = [0]
        for f in self.table.files:
            for rg in f.row_groups:
                starts.append(starts[-1] + rg.rows)
        total = starts[-1]
        cuts = {0, total}
        for k in range(1, n):
            ideal = total * k / n
            cuts.add(min(starts, key=lambda s: abs(s - ideal)))
        return sorted(cuts)

    def batches(self) -> Iterator[Any]:
        for _, table in self._groups(0, self.count()):
            yield from table.to_batches()

    def rows(self, start: int, stop: int) -> Iterator[dict[str, Any]]:
        for pos, table in self._groups(start, stop):
            lo, hi = max(start - pos, 0), min(stop - pos, table.num_rows)
            yield from table.slice(lo, hi - lo).to_pylist()

    def _groups(self, start: int, stop: int) -> Iterator[tuple[int, Any]]:
        """(first row, decoded table) of each row group overlapping ``[start, stop)``; the
        others are never fetched."""
        from astream import bridge

        todo: list[tuple[int, Any, int]] = []
        pos = 0
        for f in self.table.files:
            for g, rg in enumerate(f.row_groups):
                if rg.rows and pos + rg.rows > start and pos < stop:  # no rows: skipped
                    todo.append((pos, f, g))
                pos += rg.rows
        if not todo:
            return
        store = bridge.run(_opened(self._open))
        futs: list[Any] = []
        try:
            for _, f, g in todo[: self.PREFETCH]:
                futs.append(bridge.submit(_fetch_group(store, f, g)))
            for k, (pos, f, g) in enumerate(todo):
                data = futs[k].result()
                futs[k] = None
                if k + self.PREFETCH < len(todo):
                    _, nf, ng = todo[k + self.PREFETCH]
                    futs.append(bridge.submit(_fetch_group(store, nf, ng)))
                yield pos, _decode_group(store.url_for(f.key), f, g, data)
        finally:
            for fut in futs:
                if fut is not None:
                    fut.cancel()
            bridge.run(store.aclose())


async def _opened(make: Callable[[], Any]) -> Any:
    return make()  # stores are created on astream's loop thread


def _group_ranges(f: Any, g: int) -> list[tuple[int, int]]:
    from astream.parquet.table import merge_ranges

    return merge_ranges([r for c in f.row_groups[g].chunks for r in c])


async def _fetch_group(store: Any, f: Any, g: int) -> bytes:
    """Every column chunk of row group ``g`` of ``f``, concatenated in object order; each read
    conditional on the identity the footer was indexed with: a file rewritten since is an
    ``ObjectChangedError``, never rows of two versions of it."""
    import asyncio

    parts = await asyncio.gather(
        *(store.get_range(f.key, s, e, etag=f.etag) for s, e in _group_ranges(f, g))
    )
    return b"".join(parts)


def _decode_group(url: str, f: Any, g: int, data: bytes) -> Any:
    """Row group ``g`` of ``f`` decoded from its fetched chunks. Its rows must be the count its
    footer declares (what the row positions, the workers' cuts and the summary were computed
    from), as the streaming path requires: pyarrow reads pages as written, so a footer that
    lies about a group's rows (or a page pyarrow misreads) would shift or drop rows silently."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from astream.parquet.arrow import ChunkFile, file_metadata

    ranges = tuple(_group_ranges(f, g))
    if len(data) != sum(e - s for s, e in ranges):
        raise FormatError(f"row group {g}: short read ({len(data)} bytes)", url)
    source = ChunkFile(memoryview(data), ranges, f.size, url)
    try:
        table = pq.ParquetFile(source, metadata=file_metadata(f), pre_buffer=False).read_row_group(
            g, use_threads=False
        )
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise FormatError(f"row group {g} cannot be decoded ({exc})", url) from None
    want = f.row_groups[g].rows
    if table.num_rows != want:
        raise FormatError(
            f"row group {g} decodes to {table.num_rows} rows, its footer says {want}", url
        )
    return table


class HfDiskSource(ArrowBatches):
    kind = "huggingface"

    def files(self) -> list[str]:
        state_path = os.path.join(self.path, "state.json")
        with open(state_path, encoding="utf-8") as f:
            state = json.load(f)
        try:
            names = [d["filename"] for d in state["_data_files"]]
        except (KeyError, TypeError):
            raise FormatError(
                "no _data_files list (not a save_to_disk dataset?)", state_path
            ) from None
        for name in names:
            if os.path.isabs(name) or ".." in name.split("/"):
                raise FormatError(f"unsafe data file name {name!r}", state_path)
        return [os.path.join(self.path, n) for n in names]

    def batches(self) -> Iterator[Any]:
        pa = _pyarrow()
        for path in self.files():
            with pa.memory_map(path) as src:
                try:
                    reader = pa.ipc.open_stream(src)
                except Exception as exc:
                    raise FormatError(f"not an Arrow stream ({exc})", path) from None
                yield from reader

    def count(self) -> int:
        return sum(b.num_rows for b in self.batches())


class FolderSource(Source):
    """One row per file: ``path`` (relative), ``data``, and ``label`` (first directory) when
    every file sits in a sub-directory (the ImageFolder layout)."""

    kind = "folder"

    def files(self) -> list[str]:
        found = []
        for root, dirs, names in os.walk(self.path):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for n in names:
                if not n.startswith("."):
                    found.append(os.path.relpath(os.path.join(root, n), self.path))
        return sorted(p.replace(os.sep, "/") for p in found)

    def count(self) -> int:
        return len(self.files())

    def _data_encoding(self, files: list[str]) -> str:
        exts = {os.path.splitext(p)[1].lower() for p in files}
        images = {_IMAGE_ENC.get(e) for e in exts}
        if len(images) == 1 and None not in images:
            return images.pop()  # type: ignore[return-value]
        if exts <= _TEXT_EXT:
            return "str"
        return "bytes"

    def default_columns(self) -> dict[str, str]:
        files = self.files()
        if not files:
            raise ConfigError(f"input: folder {self.path!r} has no files")
        cols = {"path": "str", "data": self._data_encoding(files)}
        if all("/" in p for p in files):
            cols["label"] = "str"
        return cols

    def rows(self, start: int, stop: int) -> Iterator[dict[str, Any]]:
        files = self.files()
        as_text = self._data_encoding(files) == "str"
        labelled = all("/" in p for p in files)
        for rel in files[start:stop]:
            with open(os.path.join(self.path, rel), "rb") as f:
                data: Any = f.read()
            if as_text:
                try:
                    data = data.decode("utf-8")
                except UnicodeDecodeError:
                    raise FormatError("not UTF-8 text", os.path.join(self.path, rel)) from None
            row = {"path": rel, "data": data}
            if labelled:
                row["label"] = rel.split("/", 1)[0]
            yield row


def _remote_table(url: str, fmt: str | None, split: str | None) -> Source:
    """A remote input: a prefix of ``*.parquet`` objects, or one such object."""
    if fmt not in (None, "parquet"):
        raise ConfigError(f"--format: a remote input must be Parquet, got --format {fmt}")
    head, _, name = url.rstrip("/").rpartition("/")
    if name.endswith((".parquet", ".pq")) and "://" in head:
        if split:
            raise ConfigError("--split selects files under a prefix, not in one object")
        return ParquetTableSource(head, files=[name])
    return ParquetTableSource(url, split=split)


def open_source(path: str, fmt: str | None = None, split: str | None = None) -> Source:
    """The reader for ``path``; ``fmt`` (jsonl, csv, parquet, folder, huggingface) overrides
    detection by extension / layout. A remote URL (``s3://``, ``gs://``, ``azure://``...) is a
    Parquet prefix or object; so is a local directory with ``fmt="parquet"``. ``split``: only
    that split's files of a Parquet table (the Hugging Face layouts, as ``Stream(split=)``)."""
    if "://" in path and not path.startswith("file://"):
        return _remote_table(path, fmt, split)
    path = os.path.abspath(os.path.expanduser(path.removeprefix("file://")))
    if not os.path.exists(path):
        raise ConfigError(f"input: {path!r} does not exist")
    if os.path.isdir(path) and fmt == "parquet":
        return ParquetTableSource(path, split=split)
    if not os.path.isdir(path) and (
        fmt == "parquet" or (fmt is None and path.lower().endswith((".parquet", ".pq")))
    ):
        if split:
            raise ConfigError("--split selects files in a directory, not in one file")
        # one file: a table of one, so its row groups are read conditionally on the
        # identity its footer was read with (a file rewritten mid-convert is an error)
        return ParquetTableSource(os.path.dirname(path), files=[os.path.basename(path)])
    if split:
        raise ConfigError("--split is for a Parquet table (a remote prefix, or a directory "
                          "with --format parquet)")  # fmt: skip
    if fmt is None:
        ext = os.path.splitext(path)[1].lower()
        if os.path.isdir(path):
            fmt = "huggingface" if os.path.isfile(os.path.join(path, "state.json")) else "folder"
        elif ext in (".jsonl", ".ndjson", ".json"):
            fmt = "jsonl"
        elif ext in (".csv", ".tsv"):
            fmt = "csv"
        else:
            raise ConfigError(
                f"input: cannot tell the format of {path!r} from its name; pass --format"
            )
    classes: dict[str, type[Source]] = {
        "jsonl": JsonlSource,
        "csv": CsvSource,
        "folder": FolderSource,
        "huggingface": HfDiskSource,
    }
    cls = classes.get(fmt)
    if cls is None:
        raise ConfigError(f"--format: unknown {fmt!r}; choose from {sorted([*classes, 'parquet'])}")
    src = cls(path)
    if os.path.isdir(path):
        src.nbytes = sum(
            os.path.getsize(os.path.join(r, n)) for r, _, names in os.walk(path) for n in names
        )
    else:
        src.nbytes = os.path.getsize(path)
    return src


def _kind(v: Any) -> str:
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "bool"
    for t, name in ((int, "int"), (float, "float"), (str, "str"), (bytes, "bytes")):
        if isinstance(v, t):
            return name
    return "other"


def _from_strings(values: list[str]) -> str:
    def all_parse(fn: Callable[[str], Any]) -> bool:
        try:
            for v in values:
                fn(v)
        except ValueError:
            return False
        return True

    if values and all_parse(int):
        return "int"
    if values and all_parse(float):
        return "float64"
    return "str"


def infer_columns(rows: list[dict[str, Any]], from_text: bool = False) -> dict[str, str]:
    """Encodings from sample rows: int, float64, str, bytes; json for anything else (lists,
    dicts, mixed types, missing values). ``from_text``: values are CSV strings."""
    names: dict[str, None] = {}
    for r in rows:
        names.update(dict.fromkeys(r))
    if not names:
        raise ConfigError("input: no rows to infer columns from")
    out: dict[str, str] = {}
    for name in names:
        values = [r.get(name) for r in rows]
        kinds = {_kind(v) for v in values}
        if from_text and kinds == {"str"}:
            out[name] = _from_strings(values)  # type: ignore[arg-type]
        elif kinds in ({"int"}, {"bool"}, {"int", "bool"}):
            out[name] = "int"
        elif kinds in ({"float"}, {"int", "float"}):
            out[name] = "float64"
        elif kinds in ({"str"}, {"bytes"}):
            out[name] = kinds.pop()
        else:
            out[name] = "json"
    return out


def parse_columns(text: str) -> dict[str, str]:
    """``"a:int,b:str,c:ndarray:uint16"`` -> ``{"a": "int", ...}``."""
    out: dict[str, str] = {}
    for part in text.split(","):
        name, sep, enc = part.strip().partition(":")
        if not sep or not name or not enc:
            raise ConfigError(f"--columns: expected name:encoding, got {part.strip()!r}")
        out[name] = enc
    return out


def coercer(
    columns: dict[str, str], *, inferred_from: int | None = None
) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """Row -> sample with exactly ``columns``; CSV strings become ints/floats when needed.

    A key missing from a row is stored as ``None`` in a ``json`` column (json ``null``, read
    back as ``None``: how an optional key round-trips); any other encoding refuses it. With
    ``inferred_from`` (the columns were inferred from that many rows) a row with a key the
    columns lack is refused, since writing it would drop data; with user-given columns,
    unlisted keys are dropped on purpose."""
    numeric = {"int": int, "str_int": int, "str_float": float}
    known = set(columns)

    def convert(row: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, enc in columns.items():
            if name not in row:
                if enc == "json":
                    out[name] = None
                    continue
                raise ConfigError(
                    f"row has no column {name!r} (columns: {sorted(row)}); a column missing "
                    f"from some rows needs the json encoding (--columns ...,{name}:json)"
                )
            v = row[name]
            if isinstance(v, str) and enc in numeric:
                try:
                    v = numeric[enc](v)
                except ValueError:
                    raise ConfigError(f"column {name!r}: {v!r} is not {enc}") from None
            elif isinstance(v, bool) and enc == "int":
                v = int(v)
            elif isinstance(v, str) and enc.startswith(("float", "int", "uint")):
                v = float(v) if enc.startswith("float") else int(v)
            out[name] = v
        extra = None if inferred_from is None else next((k for k in row if k not in known), None)
        if extra is not None:
            raise ConfigError(
                f"row has column {extra!r} that the first {inferred_from} rows do not have "
                "(it would be dropped); list every column with --columns"
            )
        return out

    return convert
