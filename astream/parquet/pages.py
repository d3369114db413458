"""Single pages of a Parquet column chunk: where they lie, and a one-page file to decode one.

A row group must be read whole to decode any of its rows, unless its file has a *page index*:
per column chunk, an ``OffsetIndex`` giving every data page's byte range and first row
(Spark and parquet-mr write it by default, pyarrow with ``write_page_index=True``). With it, a
few rows of a row group cost, per projected column, the data page holding each row and, for a
dictionary-encoded page, the chunk's dictionary page: kilobytes to a megabyte, where the whole
row group is tens of megabytes. The start of an iteration reads its first batches that way
while whole row groups download (``Engine._range_read``).

:func:`page_layout` reads the footer (:mod:`astream.parquet.thrift`) and says, for a row group and
a projection, where each column's offset index lies; :meth:`ColumnPages.load` parses a fetched
offset index; :meth:`PageLayout.ranges_for` lists the byte ranges that hold some rows; and
:func:`one_page_file` builds, from a column's dictionary page and one data page, a complete
Parquet file of one row group and one column -- the footer's own schema subtree, column
metadata and ``created_by``, with the sizes, offsets and value count of that page -- which any
Parquet reader decodes (``parquet/io_pages.py`` uses pyarrow). Its rows are the page's rows.

Only the common case is served (else :func:`page_layout` returns None and the row group is
read whole): every projected column a single leaf (a primitive, a string or binary, a list of
primitives), each with an offset index, no encryption.

Pages with a dictionary encoding need the chunk's dictionary page. The column's encoding
statistics say how many data pages are dictionary-encoded; writers fall back from dictionary
to plain encoding once per chunk and never back, so those are the first ones. Without the
statistics every page is assumed to need it; a page that needs a dictionary that was not
fetched is found when decoding (its header says so) and is read with its row group instead.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field

from astream.parquet import thrift
from astream.parquet.thrift import BINARY, I32, I64, LIST, STRUCT, Struct

__all__ = [
    "ColumnPages",
    "PageLayout",
    "footer_struct",
    "has_page_index",
    "one_page_file",
    "page_layout",
]

_DICT_ENCODINGS = (2, 8)  # PLAIN_DICTIONARY, RLE_DICTIONARY
_DATA_PAGES = (0, 3)  # DATA_PAGE, DATA_PAGE_V2
_MAGIC = b"PAR1"


def footer_struct(footer: bytes) -> Struct:
    """The ``FileMetaData`` of ``footer`` (raises ``ValueError`` when malformed)."""
    meta, end = thrift.decode(footer)
    if end != len(footer):
        raise ValueError(f"footer has {len(footer) - end} bytes after its metadata")
    return meta


def _subtrees(schema: list[Struct]) -> list[tuple[int, int, int]]:
    """Per top-level field: (first schema element, end element, number of leaves)."""
    out: list[tuple[int, int, int]] = []

    def walk(i: int, depth: int) -> tuple[int, int]:  # (end element, leaves) of subtree i
        if i >= len(schema) or depth > 64:
            raise ValueError("schema ends inside a group, or nests past 64 levels")
        kids = int(schema[i].get_value(5, 0) or 0)
        if kids == 0:
            return i + 1, 1
        j, leaves = i + 1, 0
        for _ in range(kids):
            j, n = walk(j, depth + 1)
            leaves += n
        return j, leaves

    root_kids = int(schema[0].get_value(5, 0) or 0)
    j = 1
    for _ in range(root_kids):
        end, leaves = walk(j, 0)
        out.append((j, end, leaves))
        j = end
    return out


@dataclass
class ColumnPages:
    """One projected column's chunk in one row group."""

    name: str
    schema: list[Struct]  # its schema elements (a subtree of the file's)
    column_order: Struct | None
    chunk: Struct  # its ColumnMetaData
    index_range: tuple[int, int]  # its OffsetIndex, in the object
    dict_range: tuple[int, int] | None = None
    dict_pages: int = 0  # data pages [0, dict_pages) are dictionary-encoded
    starts: list[int] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    first_rows: list[int] = field(default_factory=list)

    @property
    def loaded(self) -> bool:
        # first_rows is assigned last in load(): a thread that sees it sees the rest
        return bool(self.first_rows)

    def load(self, index: bytes | memoryview, rows: int) -> None:
        """Parse the fetched OffsetIndex (``rows``: the row group's row count); ``ValueError``
        when it does not describe ``rows`` rows in ascending, non-overlapping pages.

        Pages that begin at the same row (a writer may flush a page of no values) are one unit
        with the pages before the next row: a unit is what is fetched and decoded together,
        and :attr:`starts`/:attr:`sizes`/:attr:`first_rows` describe units."""
        oi, _ = thrift.decode(index)
        locs = oi.get_value(1)
        if not locs or locs[0] != STRUCT or not locs[1]:
            raise ValueError(f"column {self.name!r}: offset index lists no page")
        starts: list[int] = []
        ends: list[int] = []
        firsts: list[int] = []
        first_page: list[int] = []  # each unit's first page
        for k, loc in enumerate(locs[1]):
            a, n, r = (int(loc.get_value(f, -1)) for f in (1, 2, 3))
            if a < 0 or n <= 0 or r < 0 or (ends and a < ends[-1]):
                raise ValueError(f"column {self.name!r}: offset index is malformed")
            if firsts and r == firsts[-1]:
                if a != ends[-1]:
                    raise ValueError(f"column {self.name!r}: offset index has a gap in a row")
                ends[-1] = a + n
                continue
            if (firsts and r < firsts[-1]) or (not firsts and r != 0):
                raise ValueError(f"column {self.name!r}: offset index pages out of order")
            starts.append(a)
            ends.append(a + n)
            firsts.append(r)
            first_page.append(k)
        if firsts[-1] >= rows:
            raise ValueError(f"column {self.name!r}: offset index has rows past {rows}")
        dict_at = self.chunk.get_value(11)
        if dict_at is not None and 0 <= dict_at < starts[0]:
            self.dict_range = (int(dict_at), starts[0])
            pages = _dict_pages(self.chunk, len(locs[1]))
            self.dict_pages = sum(1 for k in first_page if k < pages)
        else:
            self.dict_range, self.dict_pages = None, 0
        self.starts = starts
        self.sizes = [e - a for a, e in zip(starts, ends)]
        self.first_rows = [*firsts, rows]

    def page_of(self, row: int) -> int:
        return bisect_right(self.first_rows, row) - 1

    def page_range(self, p: int) -> tuple[int, int]:
        return (self.starts[p], self.starts[p] + self.sizes[p])

    def page_rows(self, p: int) -> tuple[int, int]:
        return (self.first_rows[p], self.first_rows[p + 1])


def _dict_pages(chunk: Struct, pages: int) -> int:
    stats = chunk.get_value(13)
    if not stats or stats[0] != STRUCT:
        return pages
    n_dict = n_data = 0
    for st in stats[1]:
        if st.get_value(1) in _DATA_PAGES:
            n_data += int(st.get_value(3, 0))
            if st.get_value(2) in _DICT_ENCODINGS:
                n_dict += int(st.get_value(3, 0))
    return n_dict if n_data == pages else pages


@dataclass
class PageLayout:
    """The projected columns of one row group, for page reads."""

    rows: int
    columns: list[ColumnPages]
    meta: Struct = field(repr=False)

    def ranges_for(self, rows: list[int]) -> list[tuple[int, int]]:
        """The byte ranges (sorted, distinct) holding ``rows`` of every projected column:
        each row's data page, and the dictionary page for dictionary-encoded ones."""
        out: set[tuple[int, int]] = set()
        for c in self.columns:
            for p in {c.page_of(r) for r in rows}:
                out.add(c.page_range(p))
                if p < c.dict_pages and c.dict_range is not None:
                    out.add(c.dict_range)
        return sorted(out)


def page_layout(meta: Struct, row_group: int, projection: tuple[str, ...]) -> PageLayout | None:
    """Where the offset indexes of ``row_group``'s ``projection`` lie, or None when its rows
    cannot be read by pages (see the module's docstring)."""
    if meta.get(8) is not None:  # encryption_algorithm
        return None
    schema_f, groups_f = meta.get_value(2), meta.get_value(4)
    if not schema_f or not groups_f or not 0 <= row_group < len(groups_f[1]):
        return None
    schema: list[Struct] = schema_f[1]
    rg: Struct = groups_f[1][row_group]
    chunks_f = rg.get_value(1)
    if not chunks_f:
        return None
    chunks: list[Struct] = chunks_f[1]
    orders_f = meta.get_value(7)
    orders: list[Struct] | None = orders_f[1] if orders_f else None
    by_name: dict[str, tuple[int, int, int, int]] = {}
    leaf = 0
    for first, end, leaves in _subtrees(schema):
        name = schema[first].get_value(4, b"").decode("utf-8", "replace")
        by_name[name] = (first, end, leaves, leaf)
        leaf += leaves
    if leaf != len(chunks):
        return None
    cols: list[ColumnPages] = []
    for name in projection:
        got = by_name.get(name)
        if got is None or got[2] != 1:
            return None
        first, end, _, k = got
        cc = chunks[k]
        md = cc.get_value(3)
        at, n = cc.get_value(4), cc.get_value(5)
        if md is None or at is None or not n or cc.get(8) is not None or cc.get(1) is not None:
            return None
        order = orders[k] if orders is not None and k < len(orders) else None
        cols.append(ColumnPages(name, schema[first:end], order, md, (int(at), int(at) + int(n))))
    return PageLayout(int(rg.get_value(3, 0)), cols, meta)


def has_page_index(footer: bytes) -> bool:
    """Whether every column chunk of every row group of this footer has an offset index (an
    unparseable footer has none)."""
    try:
        meta = footer_struct(footer)
        groups = meta.get_value(4)
        if not groups or not groups[1]:
            return False
        for rg in groups[1]:
            chunks = rg.get_value(1)
            if not chunks or not chunks[1]:
                return False
            if any(cc.get_value(4) is None or not cc.get_value(5) for cc in chunks[1]):
                return False
        return True
    except (ValueError, TypeError, AttributeError, IndexError):  # a malformed footer
        return False


def page_values(page: bytes | memoryview) -> tuple[int, int, int, int | None]:
    """(page type, header length, values, encoding) of the page starting ``page``."""
    head, length = thrift.decode(page)
    ptype = int(head.get_value(1, -1))
    if ptype == 0:
        dp = head.get_value(5)
        if dp is None:
            raise ValueError("data page without its header")
        return ptype, length, int(dp.get_value(1, 0)), dp.get_value(2)
    if ptype == 3:
        dp = head.get_value(8)
        if dp is None:
            raise ValueError("data page v2 without its header")
        return ptype, length, int(dp.get_value(1, 0)), dp.get_value(4)
    return ptype, length, 0, None


def _walk(pages: bytes) -> tuple[list[int], int, int, bool, bytes] | None:
    """Over the pages back to back in ``pages``: (their types, values, uncompressed bytes,
    whether one is dictionary-encoded, the pages less those of no values); None when they do
    not end exactly at its end. A data page of no values is left out: pyarrow reads the
    pages after one wrongly (a page of values after it decoded as an empty list)."""
    types: list[int] = []
    values = uncompressed = 0
    dict_encoded = False
    kept: list[bytes] = []
    at = 0
    while at < len(pages):
        head, end = thrift.decode(pages, at)
        ptype, _, n, encoding = page_values(pages[at:end])
        size = int(head.get_value(3, -1))
        if size < 0 or end + size > len(pages):
            return None
        if n or ptype not in _DATA_PAGES:
            types.append(ptype)
            values += n
            uncompressed += end - at + int(head.get_value(2, 0))
            dict_encoded |= encoding in _DICT_ENCODINGS
            kept.append(pages[at : end + size])
        at = end + size
    return types, values, uncompressed, dict_encoded, b"".join(kept)


def one_page_file(
    layout: PageLayout, col: ColumnPages, dictionary: bytes | None, page: bytes, rows: int
) -> tuple[bytes, int] | None:
    """A Parquet file of one row group of ``rows`` rows holding one column, whose chunk is
    ``dictionary`` (its dictionary page, or None) followed by ``page`` (a unit of data pages,
    see :meth:`ColumnPages.load`), and the values its pages hold (levels: a null or an empty
    list is one). None when those are not data pages, or need a dictionary that is not
    given."""
    walked = _walk(page)
    if walked is None:
        return None
    types, values, total_u, dict_encoded, page = walked
    if not types or any(t not in _DATA_PAGES for t in types):
        return None
    if dict_encoded and dictionary is None:
        return None
    body = bytearray(_MAGIC)
    md = Struct(col.chunk)
    for fid in (8, 10, 11, 12, 13, 14, 15, 16, 17):  # stats, indexes, filters: not this chunk's
        md.pop(fid, None)
    start = len(body)
    if dictionary is not None:
        dwalk = _walk(dictionary)
        if dwalk is None or dwalk[0] != [2]:  # exactly one dictionary page
            return None
        total_u += dwalk[2]
        md.set(11, I64, start)
        body += dictionary
    md.set(9, I64, len(body))
    body += page
    md.set(5, I64, values)
    md.set(6, I64, total_u)
    md.set(7, I64, len(body) - start)
    cc = Struct()
    cc.set(2, I64, start)
    cc.set(3, STRUCT, md)
    rg = Struct()
    rg.set(1, LIST, (STRUCT, [cc]))
    rg.set(2, I64, total_u)
    rg.set(3, I64, rows)
    root = Struct(layout.meta.get_value(2)[1][0])
    root.set(5, I32, 1)
    out = Struct()
    out.set(1, I32, int(layout.meta.get_value(1, 1)))
    out.set(2, LIST, (STRUCT, [root, *col.schema]))
    out.set(3, I64, rows)
    out.set(4, LIST, (STRUCT, [rg]))
    created = layout.meta.get(6)
    if created is not None and created[0] == BINARY:
        out[6] = created
    if col.column_order is not None:
        out.set(7, LIST, (STRUCT, [col.column_order]))
    footer = thrift.encode(out)
    body += footer
    body += len(footer).to_bytes(4, "little")
    body += _MAGIC
    return bytes(body), values
