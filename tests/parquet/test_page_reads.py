"""A few rows of a row group read by pages through the file's page index
(``parquet/pages.py``, ``parquet/io_pages.py``): a one-page file decodes to exactly
the rows of that page, and a cold iteration's first batches read pages (counted at the proxy)
and yield the same samples, in the same order, as the same iteration reading whole row groups.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import random
import re
import struct
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from astream import StreamingDataLoader, StreamingDataset
from astream.parquet import thrift
from astream.parquet.io_pages import _levels, decode_rows, layout_of, page_ranges
from astream.parquet.pages import footer_struct, one_page_file, page_layout
from astream.parquet.table import merge_ranges
from astream.storage.sync import upload

from .conftest import make_rows, same, table_of

LAYOUT = [(120, 40), (90, 30), (60, 60)]  # (rows, rows per row group) per file
PAGED = {"write_page_index": True, "data_page_size": 256, "write_batch_size": 4}


def _write(root: str, paged: bool, **kw: Any) -> list[dict[str, Any]]:
    os.makedirs(root, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for k, (n, rg) in enumerate(LAYOUT):
        part = make_rows(len(rows), n)
        opts = {**(PAGED if paged else {}), **kw}
        path = os.path.join(root, f"part-{k}.parquet")
        pq.write_table(table_of(part), path, row_group_size=rg, compression="zstd", **opts)
        rows += part
    return rows


def _footer(buf: bytes) -> bytes:
    n = struct.unpack("<I", buf[-8:-4])[0]
    return buf[-8 - n : -8]


def _normal(arr: Any) -> Any:
    return arr.dictionary_decode() if pa.types.is_dictionary(arr.type) else arr


# -- the pages themselves ---------------------------------------------------------------------


@pytest.mark.parametrize("version", ["1.0", "2.0"])
@pytest.mark.parametrize("dictionary", [True, False])
def test_every_page_decodes_to_its_rows(version: str, dictionary: bool) -> None:
    rows = make_rows(0, 150)
    sink = io.BytesIO()
    pq.write_table(table_of(rows), sink, row_group_size=50, data_page_version=version,
                   use_dictionary=dictionary, compression="snappy", **PAGED)  # fmt: skip
    buf = sink.getvalue()
    foot = _footer(buf)
    meta = footer_struct(foot)
    assert thrift.encode(meta) == foot  # the codec keeps every field
    whole = pq.ParquetFile(io.BytesIO(buf))
    names = tuple(whole.schema_arrow.names)
    pages = 0
    for g in range(whole.num_row_groups):
        ref = whole.read_row_group(g)
        lay = page_layout(meta, g, names)
        assert lay is not None and lay.rows == ref.num_rows
        for c in lay.columns:
            a, b = c.index_range
            c.load(buf[a:b], lay.rows)
            assert c.first_rows[0] == 0 and c.first_rows[-1] == lay.rows
            for p in range(len(c.starts)):
                a, b = c.page_range(p)
                r0, r1 = c.page_rows(p)
                d = c.dict_range
                dic = buf[d[0] : d[1]] if d is not None and p < c.dict_pages else None
                made = one_page_file(lay, c, dic, buf[a:b], r1 - r0)
                assert made is not None
                got = pq.read_table(pa.BufferReader(made[0])).column(0).combine_chunks()
                got = _normal(got)
                want = _normal(ref.column(c.name).slice(r0, r1 - r0).combine_chunks())
                assert got.cast(want.type).equals(want), (g, c.name, p)
                assert _levels(got) == made[1]  # the check decode_rows makes
                pages += 1
            assert (c.dict_range is not None) == dictionary
    assert pages >= 2 * 3 * len(names)  # pages per column chunk: 2 or more on average


def test_dictionary_page_needed_but_missing_is_refused() -> None:
    sink = io.BytesIO()
    pq.write_table(table_of(make_rows(0, 40)), sink, **PAGED)
    buf = sink.getvalue()
    meta = footer_struct(_footer(buf))
    lay = page_layout(meta, 0, ("txt",))
    assert lay is not None
    c = lay.columns[0]
    c.load(buf[c.index_range[0] : c.index_range[1]], lay.rows)
    assert c.dict_pages > 0
    a, b = c.page_range(0)
    assert one_page_file(lay, c, None, buf[a:b], c.first_rows[1]) is None


def test_no_page_index_or_bad_footer() -> None:
    sink = io.BytesIO()
    pq.write_table(table_of(make_rows(0, 40)), sink)
    foot = _footer(sink.getvalue())
    assert page_layout(footer_struct(foot), 0, ("label",)) is None  # no offset index
    nested = b"\x19" * 5000  # a list of a list of a list...: never a RecursionError
    for bad in (foot[:-3], foot[: len(foot) // 2], b"\x19\xff\xff\xff\xff\x0f" + foot, nested):
        with pytest.raises(ValueError):
            footer_struct(bad)


def test_malformed_footers_are_no_page_index() -> None:
    """Footers that parse as Thrift but not as Parquet never raise past the page code."""
    from astream.parquet.pages import has_page_index
    from astream.parquet.thrift import BINARY, I32, LIST, STRUCT, Struct

    ints = Struct({2: (LIST, (I32, [1, 2])), 4: (LIST, (I32, [3]))})  # lists of the wrong type
    assert has_page_index(thrift.encode(ints)) is False
    link = Struct({4: (BINARY, b"g"), 5: (I32, 1)})  # a group of one child, 2,000 deep
    chain = [
        Struct({4: (BINARY, b"root"), 5: (I32, 1)}),
        *[link] * 2000,
        Struct({4: (BINARY, b"x")}),
    ]
    deep = Struct(
        {2: (LIST, (STRUCT, chain)), 4: (LIST, (STRUCT, [Struct({1: (LIST, (STRUCT, []))})]))}
    )
    with pytest.raises(ValueError, match="nests past 64 levels"):
        page_layout(footer_struct(thrift.encode(deep)), 0, ("g",))


def test_decode_rows_any_subset(tmp_path: Any) -> None:
    """``decode_rows`` over random subsets of a row group's rows equals those rows of the
    whole row group, through the engine's own entry (the projection included)."""
    root = str(tmp_path / "t")
    _write(root, paged=True)
    ds = StreamingDataset(local=root, format="parquet", columns=["label", "tok", "nest", "txt"])
    rnd = random.Random(5)
    cat = ds.engine.catalog
    for s, entry in enumerate(cat.entries):
        lay = layout_of(entry)
        assert lay is not None
        path = os.path.join(root, entry.source.key)
        with open(path, "rb") as f:
            buf = f.read()
        whole = pq.ParquetFile(path).read_row_group(entry.row_group, columns=list(entry.projection))
        for _ in range(3):
            rows = sorted(rnd.sample(range(entry.samples), rnd.randint(1, min(6, entry.samples))))
            ranges = [c.index_range for c in lay.columns]
            got = {r: buf[r[0] : r[1]] for r in ranges}
            need = page_ranges(entry, got, rows)
            assert need is not None
            got.update({r: buf[r[0] : r[1]] for r in need})
            table = decode_rows(entry, got, rows)
            assert table is not None and table.column_names == list(entry.projection)
            for name in entry.projection:
                want = _normal(whole.column(name).combine_chunks()).take(rows)
                assert table.column(name).combine_chunks().equals(want), (s, name, rows)
            drop = next(r for r in need if r not in ranges)  # a page missing: no rows
            assert decode_rows(entry, {k: v for k, v in got.items() if k != drop}, rows) is None


def test_page_decoding_imports_no_pandas(tmp_path: Any) -> None:
    """A DataLoader worker's first rows by pages imported pandas (~0.4 s of CPU per worker before
    its first batch, with 64 MB row groups about a third of the time to it): through
    ``pq.read_table`` (the pyarrow.dataset path) and ``to_numpy`` on a list column's offsets.
    In a fresh process, decoding rows of every column from their pages must not import it."""
    import subprocess
    import sys

    root = str(tmp_path / "t")
    _write(root, paged=True)
    code = (
        "import sys\n"
        "from astream import StreamingDataset\n"
        "from astream.parquet.io_pages import decode_rows, layout_of, page_ranges\n"
        f"ds = StreamingDataset(local={root!r}, format='parquet',\n"
        "                      columns=['label', 'tok', 'nest', 'txt'])\n"
        "entry = ds.engine.catalog.entries[0]\n"
        "buf = open(ds.engine.catalog.sources[0].local + '/' + entry.source.key, 'rb').read()\n"
        "got = {r: buf[r[0]:r[1]] for r in (c.index_range for c in layout_of(entry).columns)}\n"
        "need = page_ranges(entry, got, [0, 1])\n"
        "got.update({r: buf[r[0]:r[1]] for r in need})\n"
        "table = decode_rows(entry, got, [0, 1])\n"
        "assert table is not None and table.num_rows == 2, table\n"
        "print('pandas' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False"


# -- a cold iteration over S3 ---------------------------------------------------------------


def _group_chunks(root: str, columns: list[str] | None) -> dict[str, list[list[tuple[int, int]]]]:
    """Per file, per row group, the byte ranges of its (projected) column chunks."""
    out: dict[str, list[list[tuple[int, int]]]] = {}
    for name in os.listdir(root):
        md = pq.ParquetFile(os.path.join(root, name)).metadata
        groups = out.setdefault(name, [])
        for g in range(md.num_row_groups):
            rg = md.row_group(g)
            spans = []
            for k in range(rg.num_columns):
                col = rg.column(k)
                if columns is not None and col.path_in_schema.split(".")[0] not in columns:
                    continue
                start = col.dictionary_page_offset or col.data_page_offset
                spans.append((start, start + col.total_compressed_size))
            groups.append(spans)
    return out


def _chunk_ranges(root: str, columns: list[str] | None) -> dict[str, set[tuple[int, int]]]:
    """Per file, the byte ranges of its (projected) column chunks, as a whole-group fetch
    asks for them."""
    return {n: {r for g in gs for r in g} for n, gs in _group_chunks(root, columns).items()}


def _small_gets(proxy: Any, root: str, columns: list[str] | None) -> list[tuple[str, str]]:
    """GETs of the table's files that are not whole column chunks (a row group's fetch asks
    for runs of them: from a chunk's start to a chunk's end) nor a footer (those end at the
    file's last byte)."""
    chunks = _chunk_ranges(root, columns)
    sizes = {n: os.path.getsize(os.path.join(root, n)) for n in chunks}
    out = []
    for path, rng in proxy.stats.ranges:
        name = path.rsplit("/", 1)[-1]
        if name not in chunks or not rng.startswith("bytes="):
            continue
        a, b = (int(x) for x in rng[6:].split("-"))
        if b == sizes[name] - 1:
            continue  # a footer
        starts = {s for s, _ in chunks[name]}
        ends = {e for _, e in chunks[name]}
        if a not in starts or b + 1 not in ends:
            out.append((name, rng))
    return out


def _group_fetch(root: str, columns: list[str] | None) -> Any:
    """A proxy ``hold`` test for a row group's whole fetch: a GET of one run of its
    projected column chunks, as ``merge_ranges`` joins them."""
    runs = {
        n: {r for g in gs for r in merge_ranges(g)}
        for n, gs in _group_chunks(root, columns).items()
    }

    def match(method: str, path: str, rng: str) -> bool:
        name = path.rsplit("/", 1)[-1]
        if method != "GET" or name not in runs or not rng.startswith("bytes="):
            return False
        a, b = (int(x) for x in rng[6:].split("-"))
        return (a, b + 1) in runs[name]

    return match


@contextlib.contextmanager
def _groups_held(proxy: Any, root: str, columns: list[str] | None) -> Iterator[None]:
    """The row groups' whole fetches held at the proxy for the block (the first batch is
    taken in it): a download that beat the first batch, on a busy machine, would leave its
    group nothing to read by pages. A first batch that waits for them is failed by a timer,
    not hung; the block must have held one."""
    gate = proxy.hold(_group_fetch(root, columns))
    timer = threading.Timer(60, gate.set)
    timer.start()
    try:
        yield
    finally:
        gate.set()
        timer.cancel()
    assert proxy.stats.held, "no whole fetch was held"


def _served(
    tmp_path: Any, bucket: str, server: Any, make_proxy: Any, paged: bool
) -> tuple[str, list[dict[str, Any]], str, Any]:
    """The test table written (with or without a page index), uploaded under a fresh prefix,
    and a proxy in front of the server: (root, rows, url, proxy)."""
    root = str(tmp_path / ("paged" if paged else "plain"))
    rows = _write(root, paged=paged)
    url = f"{bucket}/pages-{uuid.uuid4().hex[:8]}"
    upload(root, url)
    return root, rows, url, make_proxy(server.url)


def _ds(
    url: str, cache: str, endpoint: str, first: int, share: float = 1.0, **kw: Any
) -> StreamingDataset:
    ds = StreamingDataset(
        remote=url, local=cache, format="parquet", shuffle=True, shuffle_seed=3, batch_size=8,
        range_first_batches=first, storage_options={"endpoint_url": endpoint}, **kw,
    )  # fmt: skip
    ds.engine.range_min_bytes = 0  # small row groups here: read them by pages anyway
    ds.engine.page_share = share  # and a batch here reads many of a group's few pages
    return ds


@pytest.mark.parametrize("columns", [None, ["label", "tok"]])
def test_first_batches_by_pages(
    s3_bucket: str, s3_server: Any, make_proxy: Any, tmp_path: Any, columns: list[str] | None
) -> None:
    root, rows, url, proxy = _served(tmp_path, s3_bucket, s3_server, make_proxy, paged=True)
    off = list(_ds(url, str(tmp_path / "off"), proxy.url, 0, columns=columns))
    assert _small_gets(proxy, root, columns) == []  # whole chunks only
    proxy.reset_stats()
    ds = _ds(url, str(tmp_path / "on"), proxy.url, 2, columns=columns)
    it = iter(ds)
    with _groups_held(proxy, root, columns):
        on = [next(it) for _ in range(8)]
        first = ds.engine._parts().range_samples
    on += list(it)
    assert first >= 8  # the first batch, by pages
    small = _small_gets(proxy, root, columns)
    assert small, "no page was read"
    assert len(on) == len(off) == len(rows)
    assert all(same(a, b) for a, b in zip(on, off))
    keep = columns or list(rows[0])
    want = sorted(({k: r[k] for k in keep} for r in rows), key=lambda r: r["label"])
    assert all(same(a, b) for a, b in zip(sorted(on, key=lambda r: r["label"]), want))
    # projected pages only: every small GET lies inside a projected column's chunk or before
    # the footer (the offset indexes)
    chunks = _chunk_ranges(root, columns)
    others = _chunk_ranges(root, None)
    for name, rng in small:
        a, b = (int(x) for x in rng[6:].split("-"))
        inside = any(s <= a and b < e for s, e in merge_ranges(list(chunks[name])))
        past = a >= max(e for _, e in others[name])  # the page index, after every chunk
        assert inside or past, (name, rng)


@pytest.mark.parametrize("fmt", [None, "numpy"])
def test_loader_two_workers_by_pages(
    s3_bucket: str, s3_server: Any, make_proxy: Any, tmp_path: Any, fmt: str | None
) -> None:
    """The main process reads each worker's first batch by pages and hands the bytes over
    (``runtime/lead.py``); the workers decode them. Sample dicts and column batches."""
    root, rows, url, proxy = _served(tmp_path, s3_bucket, s3_server, make_proxy, paged=True)
    cols = ["label", "tok", "score"]

    def run(first: int, tag: str) -> list[list[Any]]:
        if fmt:  # column batches have no nulls: the columns without any
            ds = _ds(url, str(tmp_path / tag), proxy.url, first, columns=["label", "score"])
            ld = StreamingDataLoader(ds, batch_size=8, num_workers=2, batch_format=fmt)
            return [[(int(x), float(y)) for x, y in zip(b["label"], b["score"])] for b in ld]
        ds = _ds(url, str(tmp_path / tag), proxy.url, first, columns=cols)
        ld = StreamingDataLoader(ds, batch_size=8, num_workers=2, collate_fn=_as_list)
        out = []
        for b in ld:
            for sample in b:
                want = {k: rows[sample["label"]][k] for k in cols}
                assert same(sample, want), sample
            out.append([(int(x["label"]), float(x["score"])) for x in b])
        return out

    off = run(0, "off")
    assert _small_gets(proxy, root, cols) == []
    proxy.reset_stats()
    on = run(2, "on")
    assert on == off
    assert sorted(x for b in on for x in b) == [(r["label"], r["score"]) for r in rows]
    assert _small_gets(proxy, root, cols)


def _blob(i: int) -> bytes:
    """2 KB that no codec shrinks."""
    return np.random.default_rng(i).bytes(2048)


def test_random_access_by_pages(
    s3_bucket: str, s3_server: Any, make_proxy: Any, tmp_path: Any
) -> None:
    """``ds[i]`` of a row group not in the cache reads the row's pages, not the group; each
    file's offset indexes once per process. Rows of 2 KB in pages of ~4 KB, groups of 200
    rows: six reads stay far below a group's size (no promotion to a whole fetch)."""
    root = tmp_path / "wide"
    root.mkdir()
    for k in range(3):
        ids = range(k * 400, k * 400 + 400)
        t = pa.table({
            "id": pa.array(ids, pa.int64()),
            "blob": pa.array([_blob(i) for i in ids], pa.binary()),
        })  # fmt: skip
        pq.write_table(t, str(root / f"part-{k}.parquet"), row_group_size=200,
                       write_page_index=True, data_page_size=4096, write_batch_size=2,
                       use_dictionary=["id"])  # fmt: skip
    url = f"{s3_bucket}/pages-{uuid.uuid4().hex[:8]}"
    upload(str(root), url)
    proxy = make_proxy(s3_server.url)
    ds = _ds(url, str(tmp_path / "c"), proxy.url, 1)
    proxy.reset_stats()
    picks = [3, 250, 430, 799, 1100, 1001]  # two in each file
    for i in picks:
        got = ds[i]
        assert got == {"id": i, "blob": _blob(i)}, i
    ends = {n: max(e for _, e in c) for n, c in _chunk_ranges(str(root), None).items()}
    gets = [(p.rsplit("/", 1)[-1], r) for p, r in proxy.stats.ranges]
    spans = [(n, *(int(x) for x in r[6:].split("-"))) for n, r in gets]
    index_gets = [g for g in spans if g[1] >= ends[g[0]]]
    page_gets = [g for g in spans if g[1] < ends[g[0]]]
    assert len(index_gets) == 3  # one per file: the second row of each file reuses it
    # a row's pages (the id column's dictionary with them; pages within 64 KiB share a GET),
    # never a row group: each group holds 200 rows of 2 KB (413 KB)
    assert page_gets and all(b - a < 100_000 for _n, a, b in page_gets), page_gets
    assert sum(b + 1 - a for _n, a, b in page_gets) < 6 * 200 * 2048 // 8
    assert ds.engine._parts().stats.range_requests == len(gets)
    proxy.reset_stats()
    assert asyncio.run(ds.aget(610)) == {"id": 610, "blob": _blob(610)}
    assert 0 < len(proxy.stats.ranges) <= 2  # its pages (file 1's offset indexes are kept)
    assert all(
        int(r.split("-")[1]) - int(r[6:].split("-")[0]) < 100_000 for _, r in proxy.stats.ranges
    )


def _as_list(batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return batch


def test_aiter_by_pages(s3_bucket: str, s3_server: Any, make_proxy: Any, tmp_path: Any) -> None:
    """``aiter`` (the caller's own loop) reads its first batch by pages too."""
    root, rows, url, proxy = _served(tmp_path, s3_bucket, s3_server, make_proxy, paged=True)
    cols = ["label", "txt", "nest"]
    off = list(_ds(url, str(tmp_path / "off"), proxy.url, 0, columns=cols))
    proxy.reset_stats()
    ds = _ds(url, str(tmp_path / "on"), proxy.url, 1, columns=cols)

    async def go() -> tuple[list[dict[str, Any]], int]:
        it = aiter(ds.aiter(io="loop"))
        try:
            with _groups_held(proxy, root, cols):
                out = [await anext(it) for _ in range(8)]
                first = ds.engine._parts().range_samples
            return out + [x async for x in it], first
        finally:
            await ds.engine.aclose()

    on, first = asyncio.run(go())
    assert len(on) == len(off) == len(rows) and all(same(a, b) for a, b in zip(on, off))
    assert first >= 8 and _small_gets(proxy, root, cols)


def test_pages_worth_most_of_a_group_read_it_whole(
    s3_bucket: str, s3_server: Any, make_proxy: Any, tmp_path: Any
) -> None:
    """Rows spread over most of a row group's pages: the group is fetched whole instead
    (``page_share``), the same samples come out."""
    root, rows, url, proxy = _served(tmp_path, s3_bucket, s3_server, make_proxy, paged=True)
    ds = _ds(url, str(tmp_path / "c"), proxy.url, 2, share=0.01)
    got = sorted(int(s["label"]) for s in ds)
    assert got == [r["label"] for r in rows]
    assert ds.engine._parts().range_samples == 0
    offsets = _small_gets(proxy, root, None)
    # only the offset indexes were read (past every chunk), no page
    ends = {n: max(e for _, e in c) for n, c in _chunk_ranges(root, None).items()}
    assert offsets and all(int(r[6:].split("-")[0]) >= ends[n] for n, r in offsets)


def test_one_group_read_whole_reads_its_batch_whole(
    s3_bucket: str, s3_server: Any, make_proxy: Any, tmp_path: Any, monkeypatch: Any
) -> None:
    """When one row group of a batch is over ``page_share`` (made so here for the first one
    planned), no row group of that batch is read by pages: the batch waits for that group's
    download anyway, and page reads would only hold it back."""
    from astream.parquet import io_pages

    root, rows, url, proxy = _served(tmp_path, s3_bucket, s3_server, make_proxy, paged=True)
    real = io_pages.page_ranges
    planned: list[Any] = []

    def ranges(entry: Any, got: Any, want: list[int]) -> Any:
        out = real(entry, got, want)
        planned.append(entry)
        if entry is planned[0]:  # this one's pages are worth the whole group
            out = [*out, (0, 1 << 40)]
        return out

    monkeypatch.setattr(io_pages, "page_ranges", ranges)
    ds = _ds(url, str(tmp_path / "c"), proxy.url, 1)
    assert sorted(int(s["label"]) for s in ds) == [r["label"] for r in rows]
    assert len({id(e) for e in planned}) > 1  # the batch had other row groups to read by pages
    assert ds.engine._parts().range_samples == 0
    ends = {n: max(e for _, e in c) for n, c in _chunk_ranges(root, None).items()}
    small = _small_gets(proxy, root, None)
    assert small and all(int(r[6:].split("-")[0]) >= ends[n] for n, r in small)  # indexes only


def test_no_page_index_reads_whole_groups(
    s3_bucket: str, s3_server: Any, make_proxy: Any, tmp_path: Any
) -> None:
    root, _rows, url, proxy = _served(tmp_path, s3_bucket, s3_server, make_proxy, paged=False)
    ds = _ds(url, str(tmp_path / "c"), proxy.url, 2)
    assert len(list(ds)) == sum(n for n, _ in LAYOUT)
    assert ds.engine._parts().range_samples == 0
    assert _small_gets(proxy, root, None) == []


def test_inspect_says_which_files_have_a_page_index(tmp_path: Any, capsys: Any) -> None:
    from astream.cli import main as cli

    paged, plain = str(tmp_path / "paged"), str(tmp_path / "plain")
    _write(paged, paged=True)
    _write(plain, paged=False)
    os.replace(os.path.join(plain, "part-1.parquet"), os.path.join(paged, "part-9.parquet"))
    assert cli(["inspect", paged, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["page_index_files"] == 3 and info["files"] == 4
    assert {f["key"]: f["page_index"] for f in info["file_list"]} == {
        "part-0.parquet": True, "part-1.parquet": True, "part-2.parquet": True,
        "part-9.parquet": False,
    }  # fmt: skip
    assert cli(["inspect", paged]) == 0
    assert "page index   3 of 4 files" in capsys.readouterr().out
    assert cli(["inspect", plain]) == 0
    assert "page index   none" in capsys.readouterr().out


def test_rewritten_file_is_not_read_by_pages(
    s3_bucket: str, s3_server: Any, make_proxy: Any, tmp_path: Any
) -> None:
    """A file rewritten after the dataset was built (same size, one page's bytes changed):
    page reads are conditional on the indexed identity as whole reads are, so the iteration
    stops with ``ObjectChangedError`` naming it before any row of it, and ``ds[i]`` of one of
    its rows is the same error -- never rows of the new object, decoded with the old index."""
    from astream.errors import ObjectChangedError
    from astream.storage.sync import upload_key

    root, _rows, url, proxy = _served(tmp_path, s3_bucket, s3_server, make_proxy, paged=True)
    ds = _ds(url, str(tmp_path / "c"), proxy.url, 1)
    ds2 = _ds(url, str(tmp_path / "c2"), proxy.url, 1)  # both built before the rewrite
    mine = range(120, 210)  # part-1's labels
    ref = [s["label"] for s in _ds(url, str(tmp_path / "ref"), proxy.url, 1)]
    assert any(x in mine for x in ref[:8])  # the first batch, read by pages, holds its rows
    path = os.path.join(root, "part-1.parquet")
    with open(path, "rb") as f:
        data = bytearray(f.read())
    md = pq.ParquetFile(path).metadata.row_group(0).column(0)  # "label", plain int64
    data[md.data_page_offset + md.total_compressed_size - 3] ^= 0xFF  # inside the page
    new = tmp_path / "new" / "part-1.parquet"
    new.parent.mkdir()
    new.write_bytes(bytes(data))
    upload_key(str(new), url, "part-1.parquet")
    proxy.reset_stats()
    labels: list[int] = []
    with pytest.raises(ObjectChangedError, match="changed since the index was built") as ei:
        for s in ds:
            labels.append(s["label"])
    assert ei.value.url is not None and ei.value.url.endswith("/part-1.parquet")
    assert not any(x in mine for x in labels)
    # the refusal came from a page GET: the offset indexes were kept from ``ref``'s reads of
    # the same identity, so part-1's first GETs were pages inside its chunks, each refused
    ends = max(e for _, e in _chunk_ranges(root, None)["part-1.parquet"])
    pages = [
        status
        for p, rng, status in proxy.stats.answered
        if p.endswith("/part-1.parquet") and int(rng[6:].split("-")[1]) < ends
    ]
    assert pages and set(pages) == {412}, proxy.stats.answered
    with pytest.raises(ObjectChangedError, match=r"part-1\.parquet"):
        ds2[150]
    assert ds2[5]["label"] == 5  # the other files read as before


def test_page_reads_through_faults_are_exact(
    s3_bucket: str, s3_server: Any, make_proxy: Any, tmp_path: Any
) -> None:
    """Page GETs that fail (503, a reset connection, a body cut short) are retried like any
    read: the epoch is the clean one, sample for sample, and its first batch still came from
    pages. The planned faults land on part-1's first GETs of the iteration, which are page
    reads (the offset indexes come from a clean first pass in this process), and random
    faults hit the rest."""
    root, _rows, url, clean_proxy = _served(tmp_path, s3_bucket, s3_server, make_proxy, True)
    clean = list(_ds(url, str(tmp_path / "clean"), clean_proxy.url, 1))
    # seed 28: the proxy's random draws fault its 1st, 2nd, 4th, 5th... unplanned GETs, so
    # random faults come whatever the number of GETs (a retry budget of 7 outlasts them)
    proxy = make_proxy(s3_server.url, seed=28)
    ds = _ds(url, str(tmp_path / "faulty"), proxy.url, 1, download_retry=6)
    proxy.reset_stats()  # the iteration's GETs only
    chunks = _chunk_ranges(root, None)["part-1.parquet"]
    ends = max(e for _, e in chunks)

    def page(rng: str) -> bool:  # a page GET: not a whole chunk (a row group's download)
        m = re.fullmatch(r"bytes=(\d+)-(\d+)", rng)
        if m is None:  # the footer (a suffix range), or no range
            return False
        a, b = int(m[1]), int(m[2])
        return b < ends and not (a in {s for s, _ in chunks} and b + 1 in {e for _, e in chunks})

    # on page GETs: the row groups' downloads may run beside them (half the prefetcher's
    # GETs run while the first batch is read)
    proxy.plan("truncate", "reset", "503", "truncate", path="part-1.parquet", rng=page)
    proxy.configure(error_rate=0.1, reset_rate=0.05, truncate_rate=0.05)
    it = iter(ds)
    with _groups_held(proxy, root, None):
        got = [next(it) for _ in range(8)]
        first = ds.engine._parts().range_samples
    got += list(it)
    assert len(got) == len(clean) and all(same(a, b) for a, b in zip(got, clean))
    assert first >= 8
    # the first faulted page GETs of part-1 took the planned faults, in order
    planned = [f for f in proxy.stats.faulted if f[0].endswith("/part-1.parquet") and page(f[1])]
    assert [f[2] for f in planned[:4]] == ["truncate", "reset", "503", "truncate"]
    assert len(proxy.stats.faulted) > 4  # and random ones beside them
