"""``astream inspect``: what a dataset holds (shards, samples, columns, sizes, compression,
hashes), as text or ``--json``, and one decoded sample with ``--sample I``. A directory or
prefix without index.json is shown as a Parquet table (files, row groups, schema; from the
footers, read by ranged GETs).

Only index.json is read, except for ``--sample``: a local dataset is opened in place
(``LocalDataset``); a remote one through the streaming engine with a throw-away cache
directory, so an uncompressed shard costs two ranged reads, not a download.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from collections import Counter
from typing import Any

import numpy as np

from astream.cli.common import human_bytes, is_local, join_split, local_path, read_index
from astream.core.index import Index
from astream.errors import ConfigError, EmptyDatasetError, ObjectNotFoundError

__all__ = ["add_parser", "describe", "run", "sample_to_json"]

_SHOWN_SHARDS = 20


def add_parser(sub: Any) -> None:
    p = sub.add_parser("inspect", help="show a dataset's shards, columns, sizes, a sample")
    p.add_argument("url", help="dataset directory or remote URL")
    p.add_argument("--split", help="sub-directory of the dataset")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--sample", type=int, metavar="I", help="also decode and show sample I")
    p.add_argument(
        "--format",
        choices=("auto", "mds", "parquet"),
        default="auto",
        help="auto: MDS if there is an index.json, else a table of *.parquet objects",
    )
    p.add_argument(
        "--all-shards", action="store_true", help=f"list every shard, not {_SHOWN_SHARDS}"
    )
    p.add_argument(
        "--allow-unsafe-types", action="store_true", help="decode pkl columns (runs pickle)"
    )
    p.set_defaults(func=run)


def describe(index: Index) -> dict[str, Any]:
    shards = index.shards
    layouts = Counter(
        tuple(zip(s.column_names, s.column_encodings, s.column_sizes)) for s in shards
    )
    first = shards[0] if shards else None
    return {
        "samples": index.num_samples,
        "num_shards": len(shards),
        "formats": sorted({s.format for s in shards}),
        "columns": (
            [
                {"name": n, "encoding": e, "size": z}
                for n, e, z in zip(first.column_names, first.column_encodings, first.column_sizes)
            ]
            if first is not None
            else []
        ),
        "columns_vary": len(layouts) > 1,
        "compression": sorted({s.compression or "none" for s in shards}),
        "hashes": sorted({h for s in shards for h in s.hashes}),
        "raw_bytes": sum(s.raw_data.bytes for s in shards),
        "stored_bytes": sum((s.zip_data or s.raw_data).bytes for s in shards),
        "shards": [
            {
                "basename": s.remote_basename,
                "samples": s.samples,
                "raw_bytes": s.raw_data.bytes,
                "stored_bytes": (s.zip_data or s.raw_data).bytes,
                "compression": s.compression,
                "hashes": dict((s.zip_data or s.raw_data).hashes),
            }
            for s in shards
        ],
    }


def _short(value: Any) -> str:
    if isinstance(value, np.ndarray):
        head = ", ".join(str(x) for x in value.reshape(-1)[:8].tolist())
        more = ", ..." if value.size > 8 else ""
        return f"ndarray {value.dtype} shape {tuple(value.shape)}: [{head}{more}]"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"bytes[{len(value)}]: {bytes(value[:32])!r}{'...' if len(value) > 32 else ''}"
    if isinstance(value, np.generic):
        return f"{value.item()!r} ({value.dtype})"
    if hasattr(value, "mode") and hasattr(value, "size"):
        return f"image {value.mode} {value.size[0]}x{value.size[1]}"
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "..."


def sample_to_json(sample: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in sample.items():
        if isinstance(v, np.ndarray):
            out[k] = {"dtype": str(v.dtype), "shape": list(v.shape), "values": v.tolist()}
        elif isinstance(v, np.generic):
            out[k] = v.item()
        elif isinstance(v, (bytes, bytearray, memoryview)):
            out[k] = {"bytes": len(v), "hex_prefix": bytes(v[:32]).hex()}
        elif hasattr(v, "mode") and hasattr(v, "size"):
            out[k] = {"image": v.mode, "width": v.size[0], "height": v.size[1]}
        elif isinstance(v, (str, int, float, bool, type(None), list, dict)):
            out[k] = v
        else:
            out[k] = str(v)
    return out


def _get_sample(url: str, i: int, num: int, unsafe: bool) -> dict[str, Any]:
    if not -num <= i < num:
        raise ConfigError(f"--sample {i} is out of range for {num} samples")
    if is_local(url):
        from astream.local import LocalDataset

        return LocalDataset(local_path(url), allow_unsafe_types=unsafe).get_item(i)
    from astream.dataset import StreamingCore

    tmp = tempfile.mkdtemp(prefix="astream-inspect-")
    try:
        ds = StreamingCore(remote=url, local=tmp, batch_size=1, allow_unsafe_types=unsafe)
        sample: dict[str, Any] = ds.get_item(i)
        return sample
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _parquet(args: argparse.Namespace) -> int:
    """A table of ``*.parquet`` objects (no index.json): its row groups and schema."""
    from astream.cli.index import describe_table, print_table, read_table

    if args.sample is not None:
        raise ConfigError("--sample is for MDS datasets; read a Parquet row with a dataset")
    info = describe_table(read_table(args.url, args.split))
    if args.json:
        print(json.dumps({"url": args.url, **info}, indent=1))
    else:
        print_table(args.url, info, None if args.all_shards else _SHOWN_SHARDS)
    return 0


def run(args: argparse.Namespace) -> int:
    if args.format == "parquet":
        return _parquet(args)
    url = join_split(args.url, args.split)
    try:
        index = read_index(url)
    except ObjectNotFoundError:
        if args.format == "mds":
            raise
        try:
            return _parquet(args)  # no index.json: a Parquet table, if there is one
        except EmptyDatasetError:
            pass  # no *.parquet objects either: say what was missing first
        raise
    info = describe(index)
    sample = None
    if args.sample is not None:
        sample = _get_sample(url, args.sample, index.num_samples, args.allow_unsafe_types)
    if args.json:
        out = {"url": url, **info}
        if sample is not None:
            out["sample"] = {"index": args.sample, "columns": sample_to_json(sample)}
        print(json.dumps(out, indent=1, default=str))
        return 0
    cols = ", ".join(
        f"{c['name']}: {c['encoding']} ({'var' if c['size'] is None else str(c['size']) + ' B'})"
        for c in info["columns"]
    )
    print(f"dataset      {url}")
    formats = ", ".join(info["formats"])
    print(f"samples      {info['samples']} in {info['num_shards']} shards ({formats})")
    print(f"columns      {cols}{'  (differ between shards)' if info['columns_vary'] else ''}")
    print(f"compression  {', '.join(info['compression'])}")
    print(f"hashes       {', '.join(info['hashes']) or 'none'}")
    raw, stored = human_bytes(info["raw_bytes"]), human_bytes(info["stored_bytes"])
    print(f"size         raw {raw}, stored {stored}")
    shown = info["shards"] if args.all_shards else info["shards"][:_SHOWN_SHARDS]
    width = max([len(s["basename"]) for s in shown] + [5])
    print(f"{'shard':<{width}}  {'samples':>8}  {'raw bytes':>12}  {'stored bytes':>12}")
    for s in shown:
        print(
            f"{s['basename']:<{width}}  {s['samples']:>8}  {s['raw_bytes']:>12}  "
            f"{s['stored_bytes']:>12}"
        )
    if len(shown) < len(info["shards"]):
        print(f"... {len(info['shards']) - len(shown)} more shards (--all-shards or --json)")
    if sample is not None:
        print(f"sample {args.sample}:")
        for k, v in sample.items():
            print(f"  {k}: {_short(v)}")
    return 0
