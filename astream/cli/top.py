"""``astream top``: a terminal view of the running astream jobs of this node.

Theory of operation
-------------------
Every :class:`~astream.metrics.Metrics` (``announce=True``, the default) registers its job in
the node's runtime directory and keeps one record per process there, the main process's and
each DataLoader worker's (:mod:`astream.metrics.registry`). ``top`` lists the jobs whose main
process is alive, reads those files -- no port, no connection to the job -- and prints, per
job, one row per process label (``main``, ``worker 0``, ...; the workers of every epoch with
one id are added up) and a total: samples, samples/s, bytes fetched, MB/s, seconds and share of
time waited for data (the stall), cache hits/misses, evictions, retries and the prefetch depth.
The cache line is the bytes in the job's streams' cache directories, scanned by ``top`` at each
frame (the figure ``cache_limit`` counts), with the job's limit; the job's own published figure
stands in for directories ``top`` may not list.

Rates are over the last refresh; the first frame (and ``--once``) shows rates since the job
started. The screen is redrawn every ``--interval`` seconds until Ctrl-C, which exits with 0.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from astream.cli.common import human_bytes
from astream.errors import ConfigError

__all__ = ["add_parser", "frame", "run"]

_CLEAR = "\x1b[H\x1b[2J"
_HEAD = (
    f"  {'PROCESS':<10} {'SAMPLES':>10} {'SAMPLES/S':>10} {'FETCHED':>10} {'MB/S':>7} "
    f"{'WAIT S':>8} {'WAIT%':>6} {'HITS':>7} {'MISSES':>7} {'EVICT':>6} {'RETRY':>6} "
    f"{'PREFETCH':>16}"
)


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "top",
        help="live view of the astream jobs running on this node",
        description="Show the metrics of the running astream jobs of this node (jobs that use "
        "astream.metrics.Metrics), refreshed every --interval seconds until Ctrl-C.",
    )
    p.add_argument("--once", action="store_true", help="print one frame and exit")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between refreshes")
    p.add_argument("--pid", type=int, default=None, help="only the job of this main process")
    p.add_argument(
        "--runtime-dir",
        default=None,
        help="where jobs register (default: $ASTREAM_RUNTIME_DIR, $XDG_RUNTIME_DIR/astream, "
        "or <tmp>/astream-<uid>)",
    )
    p.set_defaults(func=run)


def _row(
    name: str, now: dict[str, float], prev: dict[str, float] | None, dt: float, readers: int = 1
) -> str:
    """One table row; WAIT% is the share of time waited, averaged over ``readers`` processes."""
    base = prev or {}

    def rate(key: str) -> float:
        return (now.get(key, 0) - base.get(key, 0)) / dt if dt > 0 else 0.0

    pf = f"{now.get('fly', 0):.0f}/{now.get('ready', 0):.0f} {human_bytes(now.get('pf_b', 0))}"
    return (
        f"  {name:<10} {now['samples']:>10.0f} {rate('samples'):>10.1f} "
        f"{human_bytes(now['bytes_fetched']):>10} {rate('bytes_fetched') / 1e6:>7.1f} "
        f"{now['wait_seconds']:>8.2f} {100 * min(1.0, rate('wait_seconds') / readers):>5.0f}% "
        f"{now['cache_hits']:>7.0f} {now['cache_misses']:>7.0f} {now['evictions']:>6.0f} "
        f"{now['retries']:>6.0f} {pf:>16}"
    )


def _figures(acc: dict[str, Any]) -> dict[str, float]:
    out = dict(acc["counters"])
    p = acc.get("prefetch", {})
    out["fly"] = p.get("shards_in_flight", 0)
    out["ready"] = p.get("shards_ready", 0)
    out["pf_b"] = p.get("bytes_in_flight", 0) + p.get("bytes_ready", 0)
    return out


def _sum(figs: dict[str, dict[str, float]]) -> dict[str, float]:
    total: dict[str, float] = {}
    for f in figs.values():
        for key, v in f.items():
            total[key] = total.get(key, 0) + v
    return total


def _cache_line(info: dict[str, Any], folded: dict[str, Any]) -> str | None:
    """The job's cache line: the bytes in its streams' cache directories, scanned now (the
    job's own figure may be one ``interval`` old, and older for a cache of very many files:
    see ``Metrics._cache_figure``), with the limit its main process reports. The job's figure
    stands in when the directories cannot be read from here; None when neither is known."""
    from astream.metrics.record import cache_bytes

    cache = next((a["cache"] for a in folded.values() if "cache" in a), None)
    roots = [str(st["local"]) for st in info.get("streams", []) if st.get("local")]
    nbytes = cache_bytes(roots) if roots else None
    if nbytes is None:
        if cache is None:
            return None
        nbytes = int(cache["bytes"])
    line = f"  cache    {human_bytes(nbytes)}"
    if cache is None:
        return line  # no record of the main process yet: its limit is not known
    limit = cache.get("limit")
    return line + (f" of {human_bytes(limit)} limit" if limit is not None else " (no limit)")


def frame(
    jobs: list[Any], prev: dict[str, dict[str, dict[str, float]]], now: float, interval: float
) -> tuple[str, dict[str, dict[str, dict[str, float]]]]:
    """The text of one frame, and the figures to diff the next frame against."""
    from astream.metrics.record import by_worker

    lines = [
        f"astream top -- {len(jobs)} job(s) on this node, "
        + (f"refresh {interval:g} s, Ctrl-C to quit" if prev else "rates since each job started")
    ]
    seen: dict[str, dict[str, dict[str, float]]] = {}
    for job in jobs:
        info = job.info
        started = float(info.get("started", now))
        old = prev.get(job.directory)
        dt = interval if old is not None else max(now - started, 1e-9)
        lines.append("")
        head = f"job pid {job.pid}  rank {info.get('rank', 0)}  up {now - started:.0f} s"
        if info.get("url"):
            head += f"  {info['url']}"
        lines.append(head)
        argv = " ".join(str(a) for a in info.get("argv", []))
        if argv:
            lines.append(f"  command  {argv}")
        for k, st in enumerate(info.get("streams", [])):
            lines.append(f"  stream {k} {st.get('remote') or '(local only)'} -> {st.get('local')}")
        folded = by_worker(job.records)
        cache_line = _cache_line(info, folded)
        if cache_line is not None:
            lines.append(cache_line)
        lines.append(_HEAD)
        figs: dict[str, dict[str, float]] = {}
        order = sorted(folded, key=lambda w: (w != "main", int(w) if w.isdigit() else -1))
        for label in order:
            figs[label] = _figures(folded[label])
            name = label if label == "main" else f"worker {label}"
            lines.append(_row(name, figs[label], (old or {}).get(label), dt))
        if figs:
            readers = len([w for w in figs if w != "main"]) or 1
            lines.append(_row("total", _sum(figs), _sum(old) if old else None, dt, readers))
        causes: dict[str, int] = {}
        for a in folded.values():
            for c, n in a["retry_causes"].items():
                causes[c] = causes.get(c, 0) + n
        if causes:
            lines.append("  retries  " + ", ".join(f"{c} {n}" for c, n in sorted(causes.items())))
        seen[job.directory] = figs
    if not jobs:
        lines.append("")
        lines.append("no running job found (jobs appear while they use astream.metrics.Metrics)")
    return "\n".join(lines) + "\n", seen


def run(args: argparse.Namespace) -> int:
    from astream.metrics import registry

    if not args.interval > 0:
        raise ConfigError(f"--interval must be > 0 seconds, got {args.interval}")
    prev: dict[str, dict[str, dict[str, float]]] = {}
    try:
        while True:
            jobs = registry.jobs(args.runtime_dir)
            if args.pid is not None:
                jobs = [j for j in jobs if j.pid == args.pid]
            text, prev = frame(jobs, prev, time.time(), args.interval)
            if args.once:
                sys.stdout.write(text)
                return 0
            sys.stdout.write(_CLEAR + text)
            sys.stdout.flush()
            time.sleep(args.interval)
    except KeyboardInterrupt:
        sys.stdout.write("\n")
        return 0
