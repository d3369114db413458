"""Turn the harness's records into results.json figures, report.md tables and PNG plots.

Every numeric field of the ``ok`` (clean) records of one (case, library) pair becomes
``{"median", "min", "max", "n"}``. Runs that stalled (no result before the harness's timeout)
or failed are never folded into that median: each pair's ``runs`` counts ``clean``,
``stalled`` and ``failed`` runs, and a report cell built from fewer than all runs says so
(``1.2k (2 clean, 1 stalled)``). The markdown report shows, per case, each library's median
of the case's headline metrics and astream's ratio to each peer, oriented so that a ratio
above 1 means astream is better (higher throughput, or lower time/bytes/memory). The column
``astream-py1e`` (``--shuffle both``) is astream with the reference's shuffle algorithm and
block; its ratios to the peers get their own columns.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

PEERS = ("mosaic", "lit", "lit-full")  # lit-full: litdata at item_shuffle_window=0
OURS = ("astream", "astream-py1e")  # astream's own block order, and the reference's shuffle
LIB_ORDER = ("astream", "astream-py1e", "mosaic", "lit", "lit-full", "sdk")
EPOCH_ONLY = ("astream-py1e", "lit-full")  # shuffle variants: hot/cold columns only

# metric -> True if higher is better, None: no ratio (a property of the order, not a speed)
HEADLINES: dict[str, list[tuple[str, bool | None]]] = {
    "write": [("mb_per_s", True)],
    "hot": [
        ("samples_per_s", True),
        ("mb_per_s", True),
        ("peak_pss_mb", False),
        ("order_score", None),  # shuffle quality of the yielded ids: 0 index order, 1 random
        ("shards_per_batch", None),
    ],
    "cold": [
        ("import_s", False),  # the library's import, outside ttfb_s (timed apart for all)
        ("construct_s", False),  # dataset construction (index fetch included), part of ttfb_s
        ("import_construct_s", False),  # the library's import + construction
        ("ttfb_s", False),
        ("samples_per_s", True),
        ("mb_per_s", True),
        ("proxy_bytes", False),
        ("proxy_requests", False),
        ("proxy_errors", False),  # answers >= 400 the library received (failed If-Match: 412)
        ("order_score", None),
        ("shards_per_batch", None),
    ],
    "resume": [("resume_to_first_batch_s", False), ("duplicates", False), ("missing", False)],
    "random": [
        ("later_item_us", False),
        ("first_item_s", False),
        ("first_item_bytes", False),
        ("later_item_bytes", False),
    ],
    "scale": [("index_load_s", False), ("resume_s", False), ("peak_pss_mb", False)],
    "physical": [("mb_per_s", True)],
    "compat": [("identical_to_mosaic", True)],
}


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        groups[(r["key"], r["lib"])].append(r)
    figures: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    status: dict[str, dict[str, str]] = defaultdict(dict)
    for (key, lib), rs in sorted(groups.items()):
        ok = [r for r in rs if r["status"] == "ok"]
        runs = {
            "clean": len(ok),
            "stalled": sum(r["status"] == "stalled" for r in rs),
            "failed": sum(r["status"] == "error" for r in rs),
        }
        if not ok:
            status[key][lib] = f"{rs[0]['status']}: {rs[0].get('reason', '')}"
            continue
        bad = [r for r in rs if r["status"] != "ok"]
        status[key][lib] = (
            "ok" if not bad else f"ok {len(ok)}/{len(rs)}; {bad[0]['status']}: {bad[0]['reason']}"
        )
        metrics: dict[str, Any] = {"runs": runs}
        for name in sorted({k for r in ok for k in r}):
            vals = [
                float(r[name])
                for r in ok
                if isinstance(r.get(name), (int, float)) and not isinstance(r.get(name), bool)
            ]
            vals = [v for v in vals if math.isfinite(v)]
            if name in ("rep",) or not vals:
                continue
            metrics[name] = {
                "median": statistics.median(vals),
                "min": min(vals),
                "max": max(vals),
                "n": len(vals),
            }
        if ok[0].get("data_from"):
            metrics["data_from"] = ok[0]["data_from"]
        figures[key][lib] = metrics
    return {"figures": dict(figures), "status": dict(status)}


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.3g}"


def _cell(results: dict[str, Any], key: str, lib: str, metric: str) -> tuple[str, float | None]:
    fig = results["figures"].get(key, {}).get(lib)
    if fig is None:
        st = results["status"].get(key, {}).get(lib)
        if st is None:
            return "-", None
        return ("n/a" if st.startswith("n/a") else "error"), None
    m = fig.get(metric)
    if m is None:
        return "-", None
    runs = fig.get("runs", {})
    unclean = [f"{runs[k]} {k}" for k in ("stalled", "failed") if runs.get(k)]
    note = f" ({runs['clean']} clean, {', '.join(unclean)})" if unclean else ""
    return _fmt(m["median"]) + note, m["median"]


def _ratio(a: float | None, p: float | None, higher_better: bool | None) -> str:
    if higher_better is None:
        return ""
    if a is None or p is None:
        return "n/a"
    if a == 0 and p == 0:
        return "="
    if (a == 0 and not higher_better) or (p == 0 and higher_better):
        return "inf"
    r = a / p if higher_better else p / a
    return f"{r:.3g}x"


def markdown(results: dict[str, Any]) -> str:
    meta = results["meta"]
    libs = [lib for lib in LIB_ORDER if lib in meta["libs"]]
    peers = [p for p in PEERS if p in libs and "astream" in libs]
    ours = [o for o in OURS if o in libs]
    counts = ", ".join(f"{k}: {v:,} samples" for k, v in meta["samples"].items())
    lines = [
        "# astream benchmark report",
        "",
        f"scale {meta['scale']} ({counts}), "
        f"shard target {meta['shard_bytes']:,} B, batch {meta['batch_size']}, "
        f"{meta['reps']} interleaved repetitions, {meta['cpus']} CPUs, {meta['date']}.",
        "Cells are medians; ratios are astream against the peer, >1 means astream is better.",
        "",
    ]
    keys = sorted(results["figures"].keys() | results["status"].keys())
    for group, metrics in HEADLINES.items():
        gkeys = [k for k in keys if k.split("/")[0] == group]
        if not gkeys:
            continue
        cols = [lib for lib in libs if group in ("hot", "cold") or lib not in EPOCH_ONLY]
        cols += ["sdk"] if group == "physical" else []
        # ratios compare libraries; the physical limits and byte-compat rows have none
        gpeers = [] if group in ("physical", "compat") else [p for p in peers if p in cols]
        pairs = [(o, p) for o in (ours if group in ("hot", "cold") else ours[:1]) for p in gpeers]
        head = ["case", "metric", *cols]
        head += [f"vs {p}" if o == "astream" else f"{o} vs {p}" for o, p in pairs]
        lines += [f"## {group}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for key in gkeys:
            for metric, hb in metrics:
                cells = {lib: _cell(results, key, lib, metric) for lib in cols}
                if all(c[0] == "-" for c in cells.values()):
                    continue
                row = [key, metric, *[cells[lib][0] for lib in cols]]
                row += [_ratio(cells[o][1], cells[p][1], hb) for o, p in pairs]
                lines.append("| " + " | ".join(row) + " |")
        lines.append("")
    lines += _ceiling(results, libs)
    notes = [
        f"- `{k}` {lib}: {st.splitlines()[0][:300]}"
        for k, by in sorted(results["status"].items())
        for lib, st in sorted(by.items())
        if st != "ok"
    ]
    froms = [
        f"- `{k}` {lib}: read {f['data_from']}'s copy (astream writer unavailable)"
        for k, by in sorted(results["figures"].items())
        for lib, f in by.items()
        if f.get("data_from")
    ]
    if notes or froms:
        lines += ["## notes", "", *notes, *froms, ""]
    return "\n".join(lines)


def _ceiling(results: dict[str, Any], libs: list[str]) -> list[str]:
    """Hot-epoch MB/s as a fraction of a plain sequential read of the same library's files."""
    figs = results["figures"]
    rows = []
    for key in sorted(k for k in figs if k.startswith("hot/")):
        wl = key.split("/")[1]
        # the ceiling: the best median sequential read of this workload's files (the copies
        # differ by a few header bytes; the best one is the least disturbed by machine load)
        raws = [m["mb_per_s"]["median"] for m in figs.get(f"physical/seqread/{wl}", {}).values()]
        raw_mb = max(raws, default=None)
        cells = []
        for lib in libs:
            hot = figs[key].get(lib, {}).get("mb_per_s", {}).get("median")
            cells.append(f"{100 * hot / raw_mb:.2g}%" if hot and raw_mb else "n/a")
        rows.append(f"| {key} | " + " | ".join(cells) + " |")
    if not rows:
        return []
    return [
        "## hot epoch against the sequential-read ceiling",
        "",
        "Hot MB/s as a share of a plain sequential read of the same files (issue target: >= 50%).",
        "",
        "| case | " + " | ".join(libs) + " |",
        "|" + "---|" * (len(libs) + 1),
        *rows,
        "",
    ]


def plots(results: dict[str, Any], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made: list[Path] = []
    libs = [lib for lib in LIB_ORDER if lib in results["meta"]["libs"]]
    figs = results["figures"]

    def bars(keys: list[str], metric: str, title: str, name: str) -> None:
        if not keys:
            return
        fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(keys)), 4))
        width = 0.8 / len(libs)
        for i, lib in enumerate(libs):
            vals = [figs.get(k, {}).get(lib, {}).get(metric, {}).get("median", 0.0) for k in keys]
            ax.bar([x + i * width for x in range(len(keys))], vals, width, label=lib)
        ax.set_xticks([x + width * (len(libs) - 1) / 2 for x in range(len(keys))])
        ax.set_xticklabels(keys, rotation=20, ha="right", fontsize=8)
        ax.set_title(title)
        ax.set_ylabel(metric)
        ax.legend()
        fig.tight_layout()
        path = out / name
        fig.savefig(path, dpi=90)
        plt.close(fig)
        made.append(path)

    keys = sorted(figs)
    bars(
        [k for k in keys if k.startswith("hot/")],
        "samples_per_s",
        "hot-cache epoch throughput",
        "throughput_hot.png",
    )
    cold = [k for k in keys if k.startswith("cold/")]
    bars(cold, "ttfb_s", "cold S3: time to first batch (s)", "ttfb_cold.png")
    cold = [k for k in cold if k.endswith("ms")]  # the latency sweep: keep-alive cases only
    if cold:
        fig, ax = plt.subplots(figsize=(6, 4))
        for wl in sorted({k.split("/")[1] for k in cold}):
            wk = sorted(
                (k for k in cold if k.split("/")[1] == wl),
                key=lambda k: float(k.split("/")[2].rstrip("ms")),
            )
            xs = [float(k.split("/")[2].rstrip("ms")) for k in wk]
            for lib in libs:
                ys = [figs[k].get(lib, {}).get("samples_per_s", {}).get("median") for k in wk]
                pts = [(x, y) for x, y in zip(xs, ys) if y is not None]
                if pts:
                    ax.plot(*zip(*pts), marker="o", label=f"{lib} {wl}")
        ax.set_xlabel("injected latency per request (ms)")
        ax.set_ylabel("samples/s")
        ax.set_title("cold S3 throughput vs latency")
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = out / "throughput_vs_latency.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        made.append(path)
    return made


def write_report(results: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.md").write_text(markdown(results) + "\n")
    plots(results, out)
