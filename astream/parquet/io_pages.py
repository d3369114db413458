"""A few rows of a row group read by pages (``parquet/pages.py``), not the whole group.

Runtime level: per-process state (kept layouts and offset indexes, under a lock re-made after
a fork) and the decoded rows served like ``parquet/io_rowgroup.py``'s handles; the engine does
the fetching.

At the start of an iteration the engine reads the first batches' samples by ranged GETs while
whole shards download (``Engine._range_read``). For an MDS shard that is the samples' bytes;
for a Parquet row group whose file has a page index it is, per projected column, the data
pages holding the wanted rows (and the dictionary page where one is needed), found through
the column's offset index. The offset indexes of a file are read once per process, by one
GET spanning those of every row group's projected columns when that span is small
(:data:`SPAN_MAX`), else per row group, and kept (:func:`kept_index`). Random access
(``Engine.aget_pages``) reads one row the same way.

What crosses a process (the main process reads a DataLoader worker's first batch for it) is
the fetched bytes, keyed by their object range (:func:`decode_rows` takes them); the worker
decodes. :class:`PageRows` serves the decoded rows like a ``RangeShard``: ``slot[i]`` is row
``i``'s place in its table. A page that cannot be decoded on its own (its dictionary not
fetched, a row count that disagrees with the offset index, any decode error) makes
:func:`decode_rows` return None: the row group is then read whole, by the path that checks
and reports it.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import Any

from astream.parquet.pages import PageLayout, footer_struct, one_page_file, page_layout
from astream.parquet.table import RowGroupShard

__all__ = ["PageRows", "decode_rows", "index_span", "keep_index", "kept_index", "layout_of"]

SPAN_MAX = 1 << 20  # a file's offset indexes spanning more are read per row group

# per process, used from the I/O loop thread and the consumer's: every access under _lock
_lock = threading.Lock()
_metas: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
_layouts: OrderedDict[tuple[Any, ...], PageLayout | None] = OrderedDict()
_spans: OrderedDict[tuple[Any, ...], tuple[int, int] | None] = OrderedDict()


def _new_lock() -> None:  # held by another thread (a consumer) at the instant of a fork
    global _lock
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_new_lock)


def _cached(cache: OrderedDict[Any, Any], key: Any, make: Any, limit: int) -> Any:
    with _lock:
        if key in cache:
            cache.move_to_end(key)
            return cache[key]
    value = make()  # outside the lock: it may take the lock itself (a layout needs the meta)
    with _lock:
        cache[key] = value
        while len(cache) > limit:
            cache.popitem(last=False)
    return value


def _meta(entry: RowGroupShard) -> Any:
    src = entry.source
    assert src is not None

    def make() -> Any:
        try:
            return footer_struct(src.footer)
        except ValueError:
            return None

    # keyed by the footer too: an identity without an ETag is weak
    return _cached(_metas, (src.identity(), src.footer), make, 64)


def _fresh_layout(entry: RowGroupShard, row_group: int) -> PageLayout | None:
    meta = _meta(entry)
    if meta is None:
        return None
    try:
        return page_layout(meta, row_group, entry.projection)
    except (ValueError, TypeError, AttributeError, IndexError):  # a malformed footer
        return None


def layout_of(entry: RowGroupShard) -> PageLayout | None:
    """The row group's page layout (its offset indexes not loaded yet), or None when its rows
    cannot be read by pages. Kept per process."""
    src = entry.source
    assert src is not None
    key = (src.identity(), src.footer, entry.row_group, entry.projection)
    got: PageLayout | None = _cached(
        _layouts, key, lambda: _fresh_layout(entry, entry.row_group), 4096
    )
    return got


def index_span(entry: RowGroupShard) -> tuple[int, int] | None:
    """The object range to GET for this row group's offset indexes: those of every row group
    of the file for the projected columns when they lie within :data:`SPAN_MAX` of each other
    (one GET per file), else this row group's own. Kept per process."""
    src = entry.source
    assert src is not None
    key = (src.identity(), src.footer, entry.row_group, entry.projection)
    got: tuple[int, int] | None = _cached(_spans, key, lambda: _index_span(entry), 4096)
    return got


def _index_span(entry: RowGroupShard) -> tuple[int, int] | None:
    lay = layout_of(entry)
    if lay is None:
        return None
    src = entry.source
    assert src is not None
    ranges = [c.index_range for c in lay.columns]
    mine = (min(a for a, _ in ranges), max(b for _, b in ranges))
    every = list(ranges)
    for g in range(len(src.row_groups)):
        if g != entry.row_group:
            other = _fresh_layout(entry, g)
            if other is None:
                return mine
            every += [c.index_range for c in other.columns]
    span = (min(a for a, _ in every), max(b for _, b in every))
    return span if span[1] - span[0] <= SPAN_MAX else mine


_indexes: OrderedDict[tuple[Any, ...], bytes] = OrderedDict()  # fetched offset indexes


def kept_index(url: str, entry: RowGroupShard, span: tuple[int, int]) -> bytes | None:
    """The offset-index bytes ``span`` of the entry's file at ``url``, if this process fetched
    them (keyed by the URL and the file's identity and footer)."""
    src = entry.source
    assert src is not None
    key = (url, src.identity(), src.footer, span)
    with _lock:
        got = _indexes.get(key)
        if got is not None:
            _indexes.move_to_end(key)
    return got


def keep_index(url: str, entry: RowGroupShard, span: tuple[int, int], data: bytes) -> None:
    src = entry.source
    assert src is not None
    with _lock:
        _indexes[(url, src.identity(), src.footer, span)] = data
        while len(_indexes) > 256:
            _indexes.popitem(last=False)


def _piece(got: dict[tuple[int, int], bytes], a: int, b: int) -> bytes | None:
    for (s, e), data in got.items():
        if s <= a and b <= e:
            return data[a - s : b - s]
    return None


def page_ranges(entry: RowGroupShard, index: dict[tuple[int, int], bytes], rows: list[int]) -> (
    list[tuple[int, int]] | None
):  # fmt: skip
    """The object ranges holding ``rows`` (given the fetched offset indexes), or None."""
    lay = layout_of(entry)
    if lay is None:
        return None
    try:
        _load(lay, index)
    except ValueError:
        return None
    return lay.ranges_for(rows)


def _load(lay: PageLayout, got: dict[tuple[int, int], bytes]) -> None:
    for c in lay.columns:
        if not c.loaded:
            data = _piece(got, *c.index_range)
            if data is None:
                raise ValueError(f"column {c.name!r}: its offset index was not fetched")
            c.load(data, lay.rows)


def decode_rows(entry: RowGroupShard, got: dict[tuple[int, int], bytes], rows: list[int]) -> Any:
    """The projected columns of ``rows`` (ascending) of the row group, as a ``pyarrow.Table``
    in that order, decoded from the fetched object ranges ``got`` (offset indexes and pages);
    None when they do not decode on their own (see the module's docstring)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from astream.parquet.arrow import file_metadata, normalized_table

    lay = layout_of(entry)
    if lay is None or not rows:
        return None
    src = entry.source
    assert src is not None
    want_types = file_metadata(src).schema.to_arrow_schema()
    try:
        _load(lay, got)
        arrays = []
        for c in lay.columns:
            pages: dict[int, Any] = {}
            parts = []
            for r in rows:
                p = c.page_of(r)
                arr = pages.get(p)
                if arr is None:
                    start, end = c.page_rows(p)
                    page = _piece(got, *c.page_range(p))
                    dic = _piece(got, *c.dict_range) if c.dict_range is not None else None
                    if page is None:
                        return None
                    made = one_page_file(
                        lay, c, dic if p < c.dict_pages else None, page, end - start
                    )
                    if made is None:
                        return None
                    # ParquetFile, not read_table: read_table goes through pyarrow.dataset,
                    # whose import loads pandas (~0.4 s in each DataLoader worker's first batch)
                    t = pq.ParquetFile(pa.BufferReader(made[0])).read(use_threads=False)
                    arr = normalized_table(t, (c.name,)).column(0).chunk(0)
                    if len(arr) != end - start or _levels(arr) != made[1]:
                        return None  # not the page's rows and values: never trusted
                    typ = want_types.field(c.name).type
                    if pa.types.is_dictionary(typ):
                        typ = typ.value_type
                    if arr.type != typ:
                        arr = arr.cast(typ)
                    pages[p] = (start, arr)
                start, arr = pages[p]
                parts.append(arr.slice(r - start, 1))
            arrays.append(pa.concat_arrays(parts))
        return pa.Table.from_arrays(arrays, names=[c.name for c in lay.columns])
    except (ValueError, OSError, KeyError, IndexError, pa.ArrowException):
        return None


def _levels(arr: Any) -> int:
    """How many values (levels) Parquet stores for ``arr``: one per row of a flat column;
    in a list, one per element, and one for a null or empty list."""
    return int(_level_counts(arr).sum())


def _level_counts(arr: Any) -> Any:
    import numpy as np
    import pyarrow as pa

    from astream.parquet.values import flat_values

    if not (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)):
        return np.ones(len(arr), np.int64)
    offs = flat_values(arr.offsets).astype(np.int64)  # not to_numpy: it imports pandas
    child = _level_counts(arr.values)
    cum = np.concatenate([np.zeros(1, np.int64), np.cumsum(child, dtype=np.int64)])
    return np.maximum(cum[offs[1:]] - cum[offs[:-1]], 1)


class PageRows:
    """Rows of a row group decoded from its pages: the interface of a ``RangeShard`` (and of
    ``io_rowgroup.RowGroupHandle`` for the columnar path), ``slot[i]`` being row ``i``'s row in
    :attr:`table`. Nothing of it is written to the cache."""

    __slots__ = ("_handle", "_rows", "slot")

    def __init__(self, entry: RowGroupShard, table: Any, slot: dict[int, int]) -> None:
        from astream.parquet.io_rowgroup import DecodedGroup, RowGroupHandle

        self.slot = slot
        self._rows = _RowsEntry(entry, table.num_rows)
        self._handle = RowGroupHandle(DecodedGroup(table))

    def sample(self, i: int) -> dict[str, Any]:
        return self._handle.sample(self.slot[i])

    def samples(self, indices: list[int]) -> list[dict[str, Any]]:
        slot = self.slot
        return self._handle.samples([slot[i] for i in indices])

    def columnar(self, entry: RowGroupShard) -> tuple[Any, Any]:
        return self._handle.columnar(self._rows)  # type: ignore[arg-type]

    def has_file(self) -> bool:
        return False

    def close(self) -> None:
        self._handle.close()


class _RowsEntry:
    """What ``io_rowgroup`` checks a decoded table against: the projection and the row
    count (here the rows read, not the group's)."""

    __slots__ = ("projection", "samples")

    def __init__(self, entry: RowGroupShard, rows: int) -> None:
        self.projection = entry.projection
        self.samples = rows
