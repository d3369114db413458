"""``astream index``: build a Parquet table's footer index and write it next to the data.

Theory of operation
-------------------
The footers of every ``*.parquet`` object under the URL (or of ``--split``'s files in the
Hugging Face layout) are read by ranged GETs, concurrently, into the index that
``Stream(format="parquet")`` otherwise builds in each cache directory
(:mod:`astream.parquet.io_index`); it is written to ``<url>/_astream_parquet_index.bin``.
A dataset over that URL then reads no footer at all, even with a fresh cache -- what read-only
consumers of a shared table want. A file changed after the index was written is detected by
its size/ETag and refused (rebuild with this command). With ``index_source="published"`` the
published index is the table itself and the URL is not listed (see docs/parquet.md).

:func:`read_table` and :func:`describe_table` also serve ``astream inspect`` on a Parquet table.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from astream.cli.common import human_bytes, is_local, local_path
from astream.parquet.published import INDEX_NAME, dump_table
from astream.parquet.table import ParquetTable

__all__ = ["add_parser", "describe_table", "read_table", "run"]


def add_parser(sub: Any) -> None:
    p = sub.add_parser("index", help="write a Parquet table's footer index next to the data")
    p.add_argument("url", help="directory or remote prefix of *.parquet objects")
    p.add_argument("--split", help="only this split's files (Hugging Face layout)")
    p.add_argument("--dry-run", action="store_true", help="read the footers, write nothing")
    p.add_argument("--json", action="store_true", help="machine-readable summary")
    p.set_defaults(func=run)


def _store_url(url: str) -> str:
    return local_path(url) if is_local(url) else url


def read_table(url: str, split: str | None = None, *, write: bool = False) -> ParquetTable:
    """The table's index from its footers (never from a published index); with ``write``,
    also published at ``url``/_astream_parquet_index.bin."""
    from astream import bridge
    from astream.parquet.io_index import build_table
    from astream.storage import open_store

    async def go() -> ParquetTable:
        store = open_store(_store_url(url))
        try:
            table, _ = await build_table(store, split=split, use_published=False)
            if write:
                await store.put(INDEX_NAME, dump_table(table))
            return table
        finally:
            await store.aclose()

    result: ParquetTable = bridge.run(go())
    return result


def describe_table(table: ParquetTable) -> dict[str, Any]:
    from astream.parquet.pages import has_page_index

    paged = [has_page_index(f.footer) for f in table.files]
    return {
        "format": "parquet",
        "rows": table.rows,
        "files": len(table.files),
        "row_groups": sum(len(f.row_groups) for f in table.files),
        "bytes": sum(f.size for f in table.files),
        "page_index_files": sum(paged),
        "schema": [{"name": n, "type": t} for n, t in table.schema()],
        "file_list": [
            {
                "key": f.key,
                "bytes": f.size,
                "rows": f.rows,
                "page_index": p,
                "row_groups": [
                    {"rows": g.rows, "bytes": sum(e - s for c in g.chunks for s, e in c)}
                    for g in f.row_groups
                ],
            }
            for f, p in zip(table.files, paged)
        ],
    }


def print_table(url: str, info: dict[str, Any], shown: int | None = 20) -> None:
    print(f"table        {url} (parquet)")
    print(f"rows         {info['rows']} in {info['row_groups']} row groups, {info['files']} files")
    print(f"size         {human_bytes(info['bytes'])}")
    print("schema       " + ", ".join(f"{c['name']}: {c['type']}" for c in info["schema"]))
    paged, files_n = info["page_index_files"], info["files"]
    if paged == files_n:
        print("page index   every file: a cold start and ds[i] read rows by pages")
    elif paged:
        print(f"page index   {paged} of {files_n} files (the others: whole row groups)")
    else:
        print(
            "page index   none: a cold start reads whole row groups (a writer's page index, "
            "e.g. pyarrow write_page_index=True, lets it read pages)"
        )
    files = info["file_list"] if shown is None else info["file_list"][:shown]
    width = max([len(f["key"]) for f in files] + [4])
    print(f"{'file':<{width}}  {'row group':>9}  {'rows':>8}  {'chunk bytes':>12}")
    for f in files:
        for g, rg in enumerate(f["row_groups"]):
            print(
                f"{f['key'] if g == 0 else '':<{width}}  {g:>9}  {rg['rows']:>8}  {rg['bytes']:>12}"
            )
    if len(files) < len(info["file_list"]):
        print(f"... {len(info['file_list']) - len(files)} more files (--json)")


def run(args: argparse.Namespace) -> int:
    table = read_table(args.url, args.split, write=not args.dry_run)
    info = describe_table(table)
    where = args.url.rstrip("/") + "/" + INDEX_NAME
    if args.json:
        print(json.dumps({"url": args.url, "index": None if args.dry_run else where, **info}))
        return 0
    print_table(args.url, info)
    if not args.dry_run:
        print(f"wrote        {where}")
    return 0
