"""``astream plan``: predict a run's downloads, cache and stalls from the index alone.

Theory of operation
-------------------
The source is a dataset (directory or URL holding ``index.json``), a *streams config* (a JSON
file listing streams, below) or ``synthetic:SAMPLES:SHARDS[:SHARD_BYTES]`` (a made-up index,
for "what if" questions). Its index and the order arguments go to
:func:`astream.plan.simulate_index`, once per shuffle algorithm asked for (default: every one
astream supports; the reference's take their default canonical nodes for ``--nodes`` when
``--num-canonical-nodes`` is not given) and per cache policy; no data
is read. The command prints one row per algorithm x policy x node x epoch and, with
``--report``, writes one self-contained HTML page: the table and two line charts (bytes
downloaded so far, and cache occupancy, over the steps of the epochs, for one node), drawn as
inline SVG by :func:`svg_chart` (no plotting library); a ``--report`` path ending in ``.png``
gets the two charts as a PNG through matplotlib when it is installed (:func:`png_report`).
``--json`` writes the figures.

Streams config::

    {"streams": [{"remote": "s3://bucket/a", "proportion": 0.7},
                 {"local": "/data/b", "split": "train", "proportion": 0.3}],
     "epoch_size": "10m"}

(or just the list). Per stream: ``remote`` or ``local`` (where the index is read; ``remote``
wins when both are given, as the dataset reads the index from the remote), ``split``,
``storage_options`` and at most one of ``proportion``, ``repeat``, ``choose``. Any other key is
refused with an error naming it.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from astream.cli.common import human_bytes
from astream.errors import ConfigError

__all__ = ["add_parser", "html_report", "load_streams", "png_report", "run", "svg_chart"]

REF_MAX_SAMPLES = 1 << 27  # default run: the reference orders (O(epoch)) only up to this
# default --interleavings: 8 up to this many samples per node and epoch, none above (each
# interleaving is one more exact replay with twice the events: ~6 s each per 1M samples)
INTERLEAVE_AUTO, INTERLEAVE_AUTO_MAX = 8, 1 << 20
_STREAM_KEYS = ("remote", "local", "split", "storage_options", "proportion", "repeat", "choose")
_FLAGS = {  # Python argument names in errors -> this command's flags
    "num_canonical_nodes": "--num-canonical-nodes",
    "shuffle_block_size": "--shuffle-block-size",
    "shuffle_seed": "--seed",
    "batch_size": "--batch-size",
    "cache_limit": "--cache-limit",
    "epoch_size": "--epoch-size",
    "shuffle_algo": "--shuffle-algo",
    "cache_policy": "--cache-policy",
    "num_nodes": "--nodes",
    "ranks_per_node": "--ranks",
    "workers_per_rank": "--workers",
}
_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf")  # fmt: skip


def _positive(kind: type, minimum: float, what: str) -> Any:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not value >= minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum:g}, got {text}")
        return value

    return parse


def add_parser(sub: Any) -> None:
    from astream.core.eviction import POLICIES
    from astream.plan import MODELS, SHUFFLES

    p = sub.add_parser(
        "plan",
        help="predict downloads, cache use and stalls of a run (reads only the index)",
        description="Replay a run's reads from the index and the order plan alone (no data "
        "read): per shuffle algorithm, cache policy, node and epoch, the shards and bytes "
        "downloaded, re-downloads, cache high-water, time to first batch, stall share and a "
        "shuffle-quality score.",
    )
    p.add_argument(
        "source",
        help="dataset directory or URL (index.json), a streams config (.json file), or "
        "synthetic:SAMPLES:SHARDS[:SHARD_BYTES]",
    )
    p.add_argument("--split", help="the dataset's split (sub-directory)")
    p.add_argument("--nodes", type=_positive(int, 1, "an int"), default=1, help="physical nodes")
    p.add_argument("--ranks", type=_positive(int, 1, "an int"), default=1, help="ranks per node")
    p.add_argument(
        "--workers", type=_positive(int, 1, "an int"), default=1, help="DataLoader workers per rank"
    )
    p.add_argument(
        "--batch-size", type=_positive(int, 1, "an int"), required=True, help="per-device batch"
    )
    p.add_argument("--cache-limit", help="bytes per node's cache, e.g. 50gb (default: no limit)")
    p.add_argument(
        "--cache-policy",
        action="append",
        choices=POLICIES,
        help="repeatable (default: next_use and lru with --cache-limit, else next_use)",
    )
    p.add_argument("--bandwidth-mbps", type=_positive(float, 1e-9, "a number"), default=None,
                   help="per-node bandwidth, megabits/s (enables time figures)")  # fmt: skip
    p.add_argument("--latency-ms", type=_positive(float, 0, "a number"), default=0.0,
                   help="per-request latency (with --bandwidth-mbps)")  # fmt: skip
    p.add_argument("--step-ms", type=_positive(float, 0, "a number"), default=0.0,
                   help="compute time of one training step (with --bandwidth-mbps)")  # fmt: skip
    p.add_argument("--epochs", type=_positive(int, 1, "an int"), default=1)
    p.add_argument(
        "--shuffle-algo",
        action="append",
        choices=SHUFFLES,
        help="repeatable; 'none' is shuffle=False (default: every algorithm)",
    )
    p.add_argument("--num-canonical-nodes", type=_positive(int, 1, "an int"), default=None)
    p.add_argument("--shuffle-block-size", type=_positive(int, 1, "an int"), default=None)
    p.add_argument("--seed", type=_positive(int, 0, "an int"), default=9176, help="shuffle_seed")
    p.add_argument("--epoch-size", default=None, help="samples per epoch (e.g. 10m)")
    p.add_argument("--predownload", type=_positive(int, 0, "an int"), default=None)
    p.add_argument("--interleavings", type=_positive(int, 0, "an int"), default=None,
                   help="with --cache-limit: seeded interleavings of the consumers to replay "
                   "for the BYTES RANGE column (exact model; 0: none; default 8 up to 2**20 "
                   "samples per node, else 0)")  # fmt: skip
    p.add_argument("--model", choices=MODELS, default="auto",
                   help="reads model (see docs/plan.md; default: auto)")  # fmt: skip
    p.add_argument("--report", help="write an HTML report with plots to this path")
    p.add_argument("--report-node", type=_positive(int, 0, "an int"), default=0,
                   help="the node the report's plots show (default 0)")  # fmt: skip
    p.add_argument("--json", dest="json_out", help="write the figures as JSON to this path")
    p.set_defaults(func=run)


def _flagged(text: str) -> str:
    for name, flag in _FLAGS.items():
        text = re.sub(rf"\b{name}\b", flag, text)
    return text


def load_streams(source: str, split: str | None = None) -> tuple[list[Any], dict[str, Any]]:
    """(PlanStreams, extra order arguments) of a dataset, streams config or synthetic source."""
    from astream.cli.common import join_split, read_index
    from astream.plan import PlanStream, synthetic_index

    if source.startswith("synthetic:"):
        parts = source.split(":")[1:]
        try:
            nums = [int(float(x)) for x in parts]
        except ValueError:
            nums = []
        if len(nums) not in (2, 3):
            raise ConfigError(
                f"source: {source!r} is not synthetic:SAMPLES:SHARDS[:SHARD_BYTES] (numbers)"
            )
        return [PlanStream(synthetic_index(*nums))], {}
    if not (os.path.isfile(source) or source.endswith(".json")):
        return [PlanStream(read_index(join_split(source, split)))], {}
    if split:
        raise ConfigError("--split: give each stream's split in the streams config instead")
    try:
        with open(source, encoding="utf-8") as f:
            cfg = json.load(f)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"streams config {source}: not valid JSON ({exc})") from None
    extra: dict[str, Any] = {}
    if isinstance(cfg, dict):
        unknown = sorted(set(cfg) - {"streams", "epoch_size"})
        if unknown:
            raise ConfigError(f"streams config: unknown key(s) {', '.join(unknown)}")
        if cfg.get("epoch_size") is not None:
            extra["epoch_size"] = cfg["epoch_size"]
        cfg = cfg.get("streams")
    if not isinstance(cfg, list) or not cfg:
        raise ConfigError("streams config: need a non-empty list 'streams'")
    streams = []
    for i, st in enumerate(cfg):
        if not isinstance(st, dict):
            raise ConfigError(f"streams[{i}]: need an object")
        unknown = sorted(set(st) - set(_STREAM_KEYS))
        if unknown:
            raise ConfigError(f"streams[{i}]: unknown key(s) {', '.join(unknown)}")
        where = st.get("remote") or st.get("local")
        if not where:
            raise ConfigError(f"streams[{i}]: needs 'remote' or 'local'")
        weights = {k: st[k] for k in ("proportion", "repeat", "choose") if st.get(k) is not None}
        if len(weights) > 1:
            raise ConfigError(f"streams[{i}]: give at most one of proportion, repeat, choose")
        index = read_index(join_split(where, st.get("split")), **(st.get("storage_options") or {}))
        streams.append(PlanStream(index, **weights))
    return streams, extra


def run(args: argparse.Namespace) -> int:
    from astream.plan import simulate_index

    streams, extra = load_streams(args.source, args.split)
    if args.epoch_size is not None:
        extra["epoch_size"] = args.epoch_size
    _check_report_args(args)
    notes: list[str] = []
    shuffles = _shuffles(args, streams, notes)
    policies = args.cache_policy or (["next_use", "lru"] if args.cache_limit else ["next_use"])
    interleavings = _interleavings(args, streams, notes)
    try:
        results = simulate_index(
            streams,
            batch_size=args.batch_size,
            nodes=args.nodes,
            ranks_per_node=args.ranks,
            workers=args.workers,
            epochs=args.epochs,
            cache_limit=args.cache_limit,
            cache_policy=list(dict.fromkeys(policies)),
            shuffles=shuffles,
            model=args.model,
            bandwidth_mbps=args.bandwidth_mbps,
            latency_ms=args.latency_ms,
            step_ms=args.step_ms,
            predownload=args.predownload,
            num_canonical_nodes=args.num_canonical_nodes,
            shuffle_block_size=args.shuffle_block_size,
            shuffle_seed=args.seed,
            interleavings=interleavings,
            **extra,
        )
    except ConfigError as exc:
        raise ConfigError(_flagged(str(exc))) from None
    for r in results:
        notes.extend(f"{r.shuffle}/{r.policy}: {n}" for n in r.notes)
    _write_outputs(results, args, notes)
    return 0


def _check_report_args(args: argparse.Namespace) -> None:
    """Refuse a report that cannot be written before any simulation runs."""
    if args.report and args.report.lower().endswith(".png"):
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise ConfigError(
                "--report: a .png report needs matplotlib (not installed); write .html instead"
            ) from None
    if args.report_node >= args.nodes:
        raise ConfigError(
            f"--report-node: must be < --nodes ({args.nodes}), got {args.report_node}"
        )


def _shuffles(args: argparse.Namespace, streams: Sequence[Any], notes: list[str]) -> list[str]:
    """The shuffle algorithms asked for, or every one; the reference's are left out (with a
    note) above REF_MAX_SAMPLES, since their orders cost O(epoch) time and memory."""
    from astream.plan import REFERENCE_SHUFFLES, SHUFFLES

    if args.shuffle_algo:
        return list(dict.fromkeys(args.shuffle_algo))
    total = sum(int(s.index.table.samples.sum()) for s in streams)
    if total <= REF_MAX_SAMPLES:
        return list(SHUFFLES)
    notes.append(
        f"left out {', '.join(REFERENCE_SHUFFLES)}: {total:,} samples; the reference's "
        "orders cost O(epoch) time and memory (ask for them with --shuffle-algo)"
    )
    return ["none", "astream"]


def _interleavings(args: argparse.Namespace, streams: Sequence[Any], notes: list[str]) -> int:
    """--interleavings, or by default INTERLEAVE_AUTO up to INTERLEAVE_AUTO_MAX samples per node
    and none above (each is one more exact replay)."""
    asked: int | None = args.interleavings
    if asked is not None:
        return asked
    per_node = sum(int(s.index.table.samples.sum()) for s in streams) // args.nodes
    interleavings = INTERLEAVE_AUTO if per_node <= INTERLEAVE_AUTO_MAX else 0
    if not interleavings and args.cache_limit:
        notes.append(
            f"no BYTES RANGE: {per_node:,} samples per node; each interleaving is one more "
            "exact replay (ask for them with --interleavings N)"
        )
    return interleavings


def _write_outputs(results: Sequence[Any], args: argparse.Namespace, notes: list[str]) -> None:
    """Print the table and the notes (each once); write the --json figures and the report."""
    timed = args.bandwidth_mbps is not None
    print(format_table(results, timed))
    for n in dict.fromkeys(notes):
        print(f"note: {n}")
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as f:
            json.dump(figures_json(results, vars(args)), f, indent=1)
        print(f"wrote {args.json_out}")
    if args.report and args.report.lower().endswith(".png"):
        png_report(results, args, args.report)
        print(f"wrote {args.report}")
    elif args.report:
        page = html_report(results, args, notes)
        with open(args.report, "w", encoding="utf-8") as f:
            f.write(page)
        print(f"wrote {args.report}")
    sys.stdout.flush()


_COLS = ("SHUFFLE", "POLICY", "NODE", "EPOCH", "SHARDS", "BYTES", "REDL", "HIGH-WATER",
         "1ST BATCH", "STALL", "ORDER", "SH/BATCH", "MODEL")  # fmt: skip
RANGE_COL = "BYTES RANGE"  # after BYTES, when any figure has a range (--interleavings)


def _spread(f: Any) -> str:
    if f.bytes_range is None:
        return "-"
    lo, _, hi = f.bytes_range
    return f"{human_bytes(lo)}-{human_bytes(hi)}"


def _rows(results: Sequence[Any], timed: bool, ranged: bool = False) -> list[list[str]]:
    rows = []
    for r in results:
        for f in r.epochs:
            rows.append([
                r.shuffle, r.policy, str(f.node), str(f.epoch), f"{f.downloads:,}",
                human_bytes(f.bytes), *([_spread(f)] if ranged else []), f"{f.redownloads:,}",
                human_bytes(f.high_water),
                f"{f.first_batch_s:.2f} s" if timed and f.first_batch_s is not None else "-",
                f"{100 * f.stall_share:.1f}%" if timed and f.stall_share is not None else "-",
                f"{r.quality['index_order']:.3f}", f"{r.quality['shards_per_batch']:.2f}",
                r.model,
            ])  # fmt: skip
    return rows


def _columns(results: Sequence[Any]) -> tuple[list[str], bool]:
    ranged = any(f.bytes_range is not None for r in results for f in r.epochs)
    cols = list(_COLS)
    if ranged:
        cols.insert(cols.index("BYTES") + 1, RANGE_COL)
    return cols, ranged


def format_table(results: Sequence[Any], timed: bool) -> str:
    """The text table: one row per shuffle x policy x node x epoch (with a BYTES RANGE
    column, min-max over the interleavings, when any figure has one)."""
    cols, ranged = _columns(results)
    rows = [cols, *_rows(results, timed, ranged)]
    width = [max(len(row[i]) for row in rows) for i in range(len(cols))]
    left = {0, 1, len(cols) - 1}
    lines = [
        "  ".join(
            c.ljust(width[i]) if i in left else c.rjust(width[i]) for i, c in enumerate(row)
        ).rstrip()
        for row in rows
    ]
    return "\n".join(lines)


def figures_json(results: Sequence[Any], args: dict[str, Any]) -> dict[str, Any]:
    keys = ("downloads", "bytes", "distinct_shards", "redownloads", "evictions", "high_water",
            "overcommit", "steps", "first_batch_s", "first_batch_alone_s", "stall_share",
            "bytes_range",
            "downloads_range")  # fmt: skip
    return {
        "args": {k: v for k, v in args.items() if k != "func"},
        "results": [
            {
                "shuffle": r.shuffle,
                "policy": r.policy,
                "model": r.model,
                "quality": r.quality,
                "notes": r.notes,
                "epochs": [
                    {"node": f.node, "epoch": f.epoch, **{k: getattr(f, k) for k in keys}}
                    for f in r.epochs
                ],
            }
            for r in results
        ],
    }


def _downsample(y: np.ndarray, points: int, how: str) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) with at most ``points`` points: the bucket's last value or its max."""
    n = len(y)
    if n <= points:
        return np.arange(n), y
    edges = np.linspace(0, n, points + 1).astype(np.int64)
    vals = np.maximum.reduceat(y, edges[:-1]) if how == "max" else y[edges[1:] - 1]
    return edges[1:] - 1, vals


def _nice(v: float) -> float:
    """A round axis maximum >= v, in the binary unit (KiB, MiB, ...) ``human_bytes`` prints."""
    if v <= 0:
        return 1.0
    unit = 1024.0 ** int(min(4, max(0, np.floor(np.log(v) / np.log(1024)))))
    if unit > 1:
        return unit * _nice(v / unit)
    mag = 10 ** np.floor(np.log10(v))
    for m in (1, 2, 2.5, 5, 10):
        if m * mag >= v:
            return float(m * mag)
    return float(10 * mag)


def svg_chart(
    series: Sequence[tuple[str, np.ndarray, np.ndarray]],
    title: str,
    xlabel: str,
    ylabel: str,
    *,
    width: int = 760,
    height: int = 300,
    fmt: Any = human_bytes,
    marks: Sequence[tuple[float, str]] = (),
    level: tuple[float, str] | None = None,
) -> str:
    """A line chart as an SVG string: one polyline per (label, x, y) series, axes with 5
    ticks, a legend, dashed vertical ``marks`` (x, label) and a dashed horizontal ``level``
    (y, label)."""
    left, right, top, bottom = 70, 170, 28, 42
    pw, ph = width - left - right, height - top - bottom
    xmax = max([float(x[-1]) for _, x, _ in series if len(x)] + [1.0])
    top_y = max([float(np.max(y)) for _, _, y in series if len(y)] + [0.0])
    ymax = _nice(max(top_y, level[0] if level else 0.0))
    esc = html.escape
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
        f'<text x="{left}" y="16" font-size="13" font-weight="bold">{esc(title)}</text>',
        f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>',
    ]
    for k in range(6):
        yv = ymax * k / 5
        yy = top + ph - ph * k / 5
        out.append(f'<line x1="{left - 4}" y1="{yy:.1f}" x2="{left + pw}" y2="{yy:.1f}" '
                   f'stroke="#eee"/>')  # fmt: skip
        out.append(f'<text x="{left - 6}" y="{yy + 4:.1f}" text-anchor="end">{esc(fmt(yv))}</text>')
        xv = xmax * k / 5
        xx = left + pw * k / 5
        out.append(f'<text x="{xx:.1f}" y="{top + ph + 16}" text-anchor="middle">{xv:,.0f}</text>')
    out.append(f'<text x="{left + pw / 2}" y="{height - 6}" text-anchor="middle">{esc(xlabel)}'
               "</text>")  # fmt: skip
    out.append(f'<text x="14" y="{top + ph / 2}" text-anchor="middle" '
               f'transform="rotate(-90 14 {top + ph / 2})">{esc(ylabel)}</text>')  # fmt: skip
    for xv, label in marks:
        xx = left + pw * xv / xmax
        out.append(f'<line x1="{xx:.1f}" y1="{top}" x2="{xx:.1f}" y2="{top + ph}" '
                   f'stroke="#888" stroke-dasharray="4 3"/>')  # fmt: skip
        out.append(f'<text x="{xx + 3:.1f}" y="{top + 11}" fill="#666">{esc(label)}</text>')
    if level is not None:
        yy = top + ph - ph * level[0] / ymax
        out.append(f'<line x1="{left}" y1="{yy:.1f}" x2="{left + pw}" y2="{yy:.1f}" '
                   f'stroke="#000" stroke-dasharray="6 3"/>')  # fmt: skip
        out.append(f'<text x="{left + 4}" y="{yy + 12:.1f}">{esc(level[1])}</text>')
    for i, (label, x, y) in enumerate(series):
        color = _COLORS[i % len(_COLORS)]
        if len(x):
            px = left + pw * np.asarray(x, float) / xmax
            py = top + ph - ph * np.asarray(y, float) / ymax
            pts = " ".join(f"{a:.1f},{b:.1f}" for a, b in zip(px, py))
            out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" '
                       f'points="{pts}"><title>{esc(label)}</title></polyline>')  # fmt: skip
        ly = top + 8 + 15 * i
        out.append(f'<line x1="{left + pw + 10}" y1="{ly}" x2="{left + pw + 28}" y2="{ly}" '
                   f'stroke="{color}" stroke-width="2"/>')  # fmt: skip
        out.append(f'<text x="{left + pw + 32}" y="{ly + 4}">{esc(label)}</text>')
    out.append("</svg>")
    return "\n".join(out)


def _node_series(results: Sequence[Any], node: int) -> tuple[list[Any], list[Any], list[Any]]:
    cum: list[Any] = []
    occ: list[Any] = []
    marks: list[tuple[float, str]] = []
    for r in results:
        figs = sorted((f for f in r.epochs if f.node == node), key=lambda f: f.epoch)
        by = np.concatenate([f.bytes_by_step for f in figs]) if figs else np.zeros(0, np.int64)
        oc = np.concatenate([f.occupancy_by_step for f in figs]) if figs else by
        label = f"{r.shuffle} / {r.policy}"
        cum.append((label, *_downsample(np.cumsum(by), 1500, "last")))
        occ.append((label, *_downsample(oc, 1500, "max")))
        if not marks:
            at = 0
            for f in figs[:-1]:
                at += f.steps
                marks.append((float(at), f"epoch {f.epoch + 1}"))
    return cum, occ, marks


def html_report(results: Sequence[Any], args: argparse.Namespace, notes: Sequence[str]) -> str:
    """One self-contained HTML page: settings, the table, two SVG charts, notes."""
    esc = html.escape
    timed = args.bandwidth_mbps is not None
    cum, occ, marks = _node_series(results, args.report_node)
    settings = {k: v for k, v in vars(args).items() if k != "func" and v is not None}
    cols, ranged = _columns(results)
    head = "".join(f"<th>{esc(c)}</th>" for c in cols)
    body = "\n".join(
        "<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>"
        for row in _rows(results, timed, ranged)
    )
    from astream.core.sizes import parse_size

    limit = parse_size(args.cache_limit, "cache_limit") if args.cache_limit else 0
    level = (float(limit), f"cache_limit {human_bytes(limit)}") if limit else None
    parts = [
        "<!DOCTYPE html>",
        '<html><head><meta charset="utf-8"><title>astream plan</title>',
        "<style>body{font-family:sans-serif;margin:24px}table{border-collapse:collapse;"
        "font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}"
        "td:first-child,td:nth-child(2){text-align:left}</style></head><body>",
        "<h1>astream plan</h1>",
        f"<p>Source: <code>{esc(str(args.source))}</code>. Predicted from the index and the "
        "order plan alone (no data read); see docs/plan.md for the model.</p>",
        "<p>Settings: "
        + ", ".join(f"{esc(k)}={esc(str(v))}" for k, v in settings.items())
        + "</p>",
        svg_chart(
            cum,
            f"Bytes downloaded so far, node {args.report_node}",
            "step (rank batch)",
            "bytes",
            marks=marks,
        ),
        svg_chart(
            occ,
            f"Cache occupancy, node {args.report_node}",
            "step (rank batch)",
            "bytes",
            marks=marks,
            level=level,
        ),
        f"<table><tr>{head}</tr>\n{body}</table>",
        "<p>SHARDS: shard downloads (re-downloads included); REDL: downloads of a shard already "
        "downloaded that epoch; ORDER: mean |consecutive id difference| over its value for "
        "uniformly random ids (0: index order, ~1: fully shuffled); SH/BATCH: distinct shards "
        "per device batch (rank 0).</p>",
    ]
    parts += [f"<p>Note: {esc(n)}</p>" for n in dict.fromkeys(notes)]
    parts.append("</body></html>")
    return "\n".join(parts)


def png_report(results: Sequence[Any], args: argparse.Namespace, path: str) -> None:
    """The report's two charts as one PNG, with matplotlib (only when it is installed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from astream.core.sizes import parse_size

    cum, occ, marks = _node_series(results, args.report_node)
    fig, axes = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    titles = ("Bytes downloaded so far", "Cache occupancy")
    for ax, series, title in zip(axes, (cum, occ), titles):
        for label, x, y in series:
            ax.plot(x, np.asarray(y) / 2**20, label=label, linewidth=1.2)
        for x, text in marks:
            ax.axvline(x, color="#888", linestyle="--", linewidth=0.8)
            ax.annotate(text, (x, 0), xytext=(3, 3), textcoords="offset points", color="#666")
        ax.set_title(f"{title}, node {args.report_node}")
        ax.set_ylabel("MiB")
    if args.cache_limit:
        limit = parse_size(args.cache_limit, "cache_limit")
        if limit:
            axes[1].axhline(limit / 2**20, color="k", linestyle="--", linewidth=0.8,
                            label=f"cache_limit {human_bytes(limit)}")  # fmt: skip
    axes[1].set_xlabel("step (rank batch)")
    axes[0].legend(fontsize=8)
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
