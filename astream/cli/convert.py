"""``astream convert``: JSONL / CSV / Parquet (a file, a directory or a remote prefix) / a
folder / a Hugging Face dataset -> MDS.

Theory of operation
-------------------
The input's rows are counted first, so they can be split into ``--workers`` contiguous ranges
and the progress bar knows its total. Columns come from ``--columns`` or are inferred from the
first 1,000 rows. With one worker the rows go straight into one :class:`MDSWriter` at ``out``.
With N workers, N spawned processes each write their range to ``out/partNNNNN`` and
``merge_index`` joins the parts in order, so the merged dataset lists samples in input order.
Workers report progress through a queue; the parent drives one tqdm bar (samples/s, and MB/s
of input consumed) and prints one summary line.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import queue
import shutil
import sys
import tempfile
import time
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

from astream.cli.common import human_bytes, is_local, local_path, read_index
from astream.cli.sources import Source, coercer, infer_columns, open_source, parse_columns
from astream.errors import ConfigError, EmptyDatasetError

__all__ = ["add_parser", "run"]

_INFER_ROWS = 1000
_REPORT_EVERY = 256
# --workers: processes on this machine (local engine), or the cores of a local Spark / Ray
# session. The largest single machines have 768 hardware threads; each worker is a Python
# process of ~100 MB, so more than 1024 is a typo, not a plan.
MAX_WORKERS = 1024
_progress_q: Any = None


def add_parser(sub: Any) -> None:
    p = sub.add_parser("convert", help="convert JSONL/CSV/Parquet/folder/HF data to MDS")
    p.add_argument(
        "input",
        help="a .jsonl/.csv/.tsv/.parquet file, a folder, a HF dataset dir, or a remote "
        "Parquet prefix/object (s3://, gs://, azure://...)",
    )
    p.add_argument("out", help="output directory or remote URL (s3://, gs://, az://...)")
    p.add_argument("--format", choices=["jsonl", "csv", "parquet", "folder", "huggingface"])
    p.add_argument("--split", help="a Parquet table's split (Hugging Face layout: data/train-*)")
    p.add_argument("--columns", help="name:encoding,... (default: inferred from the data)")
    p.add_argument("--compression", help="zstd, zstd:7, gz, bz2, br, snappy (default none)")
    p.add_argument("--hashes", default="", help="comma-separated, e.g. xxh64,sha1")
    p.add_argument("--size-limit", default="64mb", help="shard size limit (default 64mb)")
    p.add_argument("--workers", type=int, default=1, help="writer processes (default 1)")
    p.add_argument(
        "--engine",
        choices=["local", "spark", "ray"],
        default="local",
        help="local processes (default), or a local Spark / Ray run (see docs/spark.md)",
    )
    p.add_argument(
        "--exist-ok", action="store_true", help="replace an existing output (local or remote)"
    )
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None)
    p.set_defaults(func=run)


def check_workers(workers: int) -> None:
    if not 1 <= workers <= MAX_WORKERS:
        raise ConfigError(f"--workers must be in 1..{MAX_WORKERS}, got {workers}")


def _init_worker(q: Any) -> None:
    global _progress_q
    _progress_q = q


def write_range(
    src: Source,
    columns: dict[str, str],
    out: str,
    start: int,
    stop: int,
    opts: dict[str, Any],
    inferred_from: int | None = None,
) -> int:
    """Write rows ``[start, stop)`` of ``src`` as one MDS dataset at ``out``.

    ``inferred_from``: the columns were inferred from that many rows (see ``coercer``)."""
    from astream.writer.mds import MDSWriter

    convert = coercer(columns, inferred_from=inferred_from)
    done = 0
    with MDSWriter(out=out, columns=columns, **opts) as w:
        for i, row in enumerate(src.rows(start, stop), start):
            try:
                w.write(convert(row))
            except ConfigError as exc:
                raise ConfigError(f"{src.path}: row {i}: {exc}") from None
            done += 1
            if done % _REPORT_EVERY == 0 and _progress_q is not None:
                _progress_q.put(_REPORT_EVERY)
    if _progress_q is not None:
        _progress_q.put(done % _REPORT_EVERY)
    return done


class _Direct:
    """In-process stand-in for the workers' queue: a report updates the bar at once."""

    def __init__(self, bar: Any) -> None:
        self.bar = bar

    def put(self, k: int) -> None:
        self.bar.update(k)


def _columns(args: argparse.Namespace, src: Source) -> tuple[dict[str, str], int | None]:
    """The columns, and how many rows they were inferred from (None: given or fixed)."""
    if args.columns:
        return parse_columns(args.columns), None
    fixed = src.default_columns()
    if fixed is not None:
        return fixed, None
    rows = list(src.rows(0, _INFER_ROWS))
    return infer_columns(rows, from_text=src.kind == "csv"), len(rows)


def _prepare_out(out: str, workers: int, exist_ok: bool) -> None:
    if not is_local(out):
        from astream.writer.remote import check_remote_out

        # refused unless --exist-ok; with it and several workers, emptied now (the parts and
        # the merged index are written under it next); one writer replaces it itself
        check_remote_out(out, exist_ok, replace=workers > 1 and not out.startswith("hf://"))
        return
    path = local_path(out)
    if os.path.isdir(path) and os.listdir(path):
        if not exist_ok:
            raise ConfigError(f"out: {path!r} is not empty (pass --exist-ok to replace it)")
        if workers > 1:
            shutil.rmtree(path)


def _part(out: str, i: int) -> str:
    name = f"part{i:05d}"
    return out.rstrip("/") + "/" + name if not is_local(out) else os.path.join(out, name)


def _run_workers(
    args: argparse.Namespace,
    src: Source,
    columns: dict[str, str],
    total: int,
    bar: Any,
    inferred_from: int | None,
) -> None:
    from astream.writer.merge import merge_index

    bounds = src.bounds(args.workers)
    n = args.workers = len(bounds) - 1
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    opts = _writer_opts(args, exist_ok=True)
    with ProcessPoolExecutor(n, mp_context=ctx, initializer=_init_worker, initargs=(q,)) as ex:
        futs: list[Future[int]] = [
            ex.submit(
                write_range,
                src,
                columns,
                _part(args.out, k),
                bounds[k],
                bounds[k + 1],
                opts,
                inferred_from,
            )
            for k in range(n)
        ]
        while not all(f.done() for f in futs):
            try:
                bar.update(q.get(timeout=0.5))  # wakes on every report; the timeout only
            except queue.Empty:  # notices a worker that died without one
                pass
            for f in futs:
                if f.done() and f.exception() is not None:
                    raise f.exception()  # type: ignore[misc]
        for f in futs:
            f.result()
    while True:
        try:
            bar.update(q.get_nowait())
        except queue.Empty:
            break
    urls = [_part(args.out, k).rstrip("/") + "/index.json" for k in range(n)]
    merge_index(urls, args.out)


def _writer_opts(args: argparse.Namespace, exist_ok: bool) -> dict[str, Any]:
    hashes = [h.strip() for h in args.hashes.split(",") if h.strip()]
    return {
        "compression": args.compression,
        "hashes": hashes,
        "size_limit": args.size_limit,
        "exist_ok": exist_ok,
    }


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    check_workers(args.workers)
    if getattr(args, "engine", "local") != "local":
        if getattr(args, "split", None):
            raise ConfigError(f"--split: only with --engine local, not --engine {args.engine}")
        from astream.cli.engines import run_engine

        return run_engine(args)
    src = open_source(args.input, args.format, getattr(args, "split", None))
    total = src.count()
    if total == 0:
        raise EmptyDatasetError(f"input: {src.path!r} is empty: no rows to write")
    columns, inferred_from = _columns(args, src)
    workers = min(args.workers, total)
    args.workers = workers
    _prepare_out(args.out, workers, args.exist_ok)
    hub_out = None
    if workers > 1 and args.out.startswith("hf://"):  # staged here, then ONE commit
        hub_out, args.out = args.out, tempfile.mkdtemp(prefix="astream-convert-")
    show = sys.stderr.isatty() if args.progress is None else args.progress
    t0 = time.perf_counter()
    with tqdm(total=total, unit="samples", disable=not show, file=sys.stderr) as bar:

        def on_update(k: int) -> None:
            dt = max(time.perf_counter() - t0, 1e-9)
            bar.set_postfix_str(f"{src.nbytes * bar.n / total / dt / 1e6:.1f} MB/s", False)
            _orig(k)

        _orig, bar.update = bar.update, on_update
        if workers == 1:
            _init_worker(_Direct(bar))
            try:
                write_range(
                    src,
                    columns,
                    args.out,
                    0,
                    total,
                    _writer_opts(args, args.exist_ok),
                    inferred_from,
                )
            finally:
                _init_worker(None)
        else:
            _run_workers(args, src, columns, total, bar, inferred_from)
    if hub_out is not None:
        from astream.writer.hfsink import publish_folder

        try:
            publish_folder(args.out, hub_out, args.exist_ok)
            index = read_index(args.out)
        finally:
            shutil.rmtree(args.out, ignore_errors=True)
        args.out = hub_out
    dt = time.perf_counter() - t0
    index = read_index(args.out) if hub_out is None else index
    stored = sum((s.zip_data or s.raw_data).bytes for s in index.shards)
    cols = ", ".join(f"{k}:{v}" for k, v in columns.items())
    print(
        f"converted {index.num_samples} samples ({src.kind}) into {len(index.shards)} shards, "
        f"{human_bytes(stored)}, at {args.out} in {dt:.2f} s "
        f"({index.num_samples / dt:.0f} samples/s, {src.nbytes / dt / 1e6:.1f} MB/s); "
        f"columns {cols}"
    )
    return 0
