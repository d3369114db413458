"""Reading a Parquet object's footer into a :class:`~astream.parquet.table.ParquetFile`.

I/O (runtime level): reads through the ObjectStore. A footer costs one ranged GET of the
object's last :data:`TAIL` bytes (a second when the footer is longer); the listing gave the
size, so no HEAD. pyarrow parses the footer Thrift (imported lazily: the ``[parquet]`` extra).
A footer that is missing, truncated, encrypted or corrupt, or whose counts disagree, is a
:class:`FormatError` naming the object's URL.

:func:`gc_paused` keeps Python's cyclic collector off while a table's footers are read (see
its docstring for why).
"""

from __future__ import annotations

import contextlib
import gc
import struct
import threading
from collections.abc import Iterator
from typing import Any

from astream.errors import FormatError
from astream.parquet import arrow
from astream.parquet.table import ParquetFile, RowGroup
from astream.storage.base import ObjectInfo, ObjectStore

__all__ = ["TAIL", "footer_file", "gc_paused", "read_footer"]

TAIL = 64 << 10  # bytes read from the end of each object: the footer, in one GET usually


def _leaves(t: Any) -> int:
    n = t.num_fields
    return 1 if n == 0 else sum(_leaves(t.field(i).type) for i in range(n))


def footer_file(info: ObjectInfo, meta: bytes, store: ObjectStore) -> ParquetFile:
    """A :class:`ParquetFile` from one object's identity and its footer Thrift bytes (the
    object is ``info.key`` of ``store``: its URL is made only to name it in an error). A row
    group of no rows is kept with no byte ranges (no shard is made of it). A footer whose
    row count is not its row groups' sum, or a row group whose count is not the values of
    its flat columns, is a ``FormatError``."""
    pq = arrow.pyarrow_parquet()
    import pyarrow as pa

    try:
        md = pq.read_metadata(
            pa.BufferReader(b"PAR1" + meta + struct.pack("<I", len(meta)) + b"PAR1")
        )
        schema = md.schema.to_arrow_schema()
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise FormatError(f"corrupt Parquet footer ({exc})", store.url_for(info.key)) from None
    names = [f.name for f in schema]
    widths = [_leaves(f.type) for f in schema]
    if sum(widths) != md.num_columns:
        raise FormatError(
            f"footer lists {md.num_columns} column chunks, its schema {sum(widths)}",
            store.url_for(info.key),
        )
    pad = 100 if (md.created_by or "").startswith("parquet-mr") else 0  # PARQUET-816
    data_end = info.size - len(meta) - 8
    flat = [md.schema.column(j).max_repetition_level == 0 for j in range(md.num_columns)]
    groups = []
    for g in range(md.num_row_groups):
        rg = md.row_group(g)
        if rg.num_rows == 0:  # nothing to read (writers leave its chunk offsets at 0)
            groups.append(RowGroup(0, tuple(() for _ in widths)))
            continue
        leaf = 0
        chunks: list[tuple[tuple[int, int], ...]] = []
        for w in widths:
            ranges = []
            for j in range(leaf, leaf + w):
                c = rg.column(j)
                if flat[j] and c.num_values != rg.num_rows:  # one value (or null) per row
                    raise FormatError(
                        f"row group {g} says {rg.num_rows} rows, its column "
                        f"{md.schema.column(j).path!r} holds {c.num_values} values",
                        store.url_for(info.key),
                    )
                start = c.data_page_offset
                d = c.dictionary_page_offset
                if c.has_dictionary_page and d is not None and 0 < d < start:
                    start = d
                end = min(start + c.total_compressed_size + pad, data_end)
                if not 4 <= start < end:
                    raise FormatError(
                        f"row group {g}, column {schema[len(chunks)].name!r}: chunk range "
                        f"{start}-{end} lies outside the data pages (4-{data_end})",
                        store.url_for(info.key),
                    )
                ranges.append((start, end))
            leaf += w
            chunks.append(tuple(sorted(ranges)))
        groups.append(RowGroup(rg.num_rows, tuple(chunks)))
    total = sum(g.rows for g in groups)
    if total != md.num_rows:  # which rows does the file hold? neither count can be trusted
        raise FormatError(
            f"footer says {md.num_rows} rows, its row groups hold {total}",
            store.url_for(info.key),
        )
    return ParquetFile(
        info.key,
        info.size,
        info.etag,
        tuple(names),
        tuple(str(f.type) for f in schema),
        tuple(groups),
        bytes(meta),
    )


async def read_footer(
    store: ObjectStore, info: ObjectInfo, tail: bytes | None = None
) -> ParquetFile:
    """``tail``: the object's last ``TAIL`` bytes when already read (with its identity)."""

    def bad(why: str) -> FormatError:  # the URL is made only for an error
        return FormatError(why, store.url_for(info.key))

    if info.size < 12:
        raise bad(f"{info.size} bytes: too small to be a Parquet file")
    n_tail = min(info.size, TAIL)
    if tail is None:
        tail = await store.get_range(info.key, info.size - n_tail, info.size)
    if len(tail) != n_tail:
        raise bad(f"object shorter than listed ({info.size} bytes)")
    if tail[-4:] == b"PARE":
        raise bad("encrypted Parquet footers are not supported")
    if tail[-4:] != b"PAR1":
        raise bad("no Parquet footer (missing PAR1 magic: truncated or not Parquet)")
    (n,) = struct.unpack("<I", tail[-8:-4])
    if n + 12 > info.size:
        raise bad(f"footer length {n} does not fit in the {info.size}-byte object (truncated?)")
    if n + 8 <= n_tail:
        meta = tail[n_tail - 8 - n : n_tail - 8]
    else:
        head = await store.get_range(info.key, info.size - 8 - n, info.size - n_tail)
        meta = head + tail[:-8]
    return footer_file(info, meta, store)


_GC_LOCK = threading.Lock()
_gc_holds = [0, False]  # builds under way in this process; whether the collector was enabled


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while a table's footers are read, back as it was
    when the last build running in this process ends. Each footer read leaves ~20 container
    objects alive (its entry) and ~2 in cycles (the HTTP client's); the full collections
    that the survivors set off traverse every object of the process (torch's included) and
    took 0.4-1 s of a 4-5 s cold start over 10,000 files.
    The cycles left meanwhile (~20,000 small objects for 10,000 footers) are collected by
    the collector's next run after it is enabled again."""
    with _GC_LOCK:
        if _gc_holds[0] == 0:
            _gc_holds[1] = gc.isenabled()
            gc.disable()
        _gc_holds[0] += 1
    try:
        yield
    finally:
        with _GC_LOCK:
            _gc_holds[0] -= 1
            if _gc_holds[0] == 0 and _gc_holds[1]:
                gc.enable()
