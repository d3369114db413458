"""The tables of README.md from a run's results.json: medians with min-max of clean runs,
failed runs named apart, and astream at its default order against the best peer.

    python benchmarks/results/cold-shaped/tables.py benchmarks/results/cold-shaped/wan
"""

from __future__ import annotations

import json
import statistics
import sys
from typing import Any

LIBS = ["astream-py1e", "astream", "mosaic", "lit", "lit-full"]
PEERS = ("mosaic", "lit", "lit-full")
METRICS = (
    ("ttfb_s", "first batch s", min),
    ("mb_per_s", "MB/s", max),
    ("steady_samples_per_s", "samples/s after the first batch", max),
)


def fmt(v: float, metric: str) -> str:
    if metric == "ttfb_s":
        return f"{v:.2f}"
    return f"{v:,.0f}" if v >= 1000 else f"{v:.1f}"


def table(path: str) -> str:
    with open(f"{path}/results.json") as f:
        records: list[dict[str, Any]] = json.load(f)["records"]
    ok: dict[tuple[str, str], list[dict[str, Any]]] = {}
    bad: dict[tuple[str, str], list[str]] = {}
    for x in records:
        key = x.get("key", "")
        if not key.startswith("cold/"):
            continue
        if x.get("status") == "ok":
            ok.setdefault((key, x["lib"]), []).append(x)
        else:
            bad.setdefault((key, x["lib"]), []).append(str(x.get("status")))
    out = [
        "| case | metric | " + " | ".join(LIBS) + " | default vs best peer |",
        "|---|---|" + "---|" * (len(LIBS) + 1),
    ]
    for case in sorted({k for k, _ in ok} | {k for k, _ in bad}):
        wl = case.split("/")[1]
        w = "w0" if case.endswith("-w0") else "w2"
        for metric, name, best in METRICS:
            cells, med = [], {}
            for lib in LIBS:
                xs = [x[metric] for x in ok.get((case, lib), [])]
                if not xs:
                    cells.append("failed" if (case, lib) in bad else "-")
                    continue
                med[lib] = statistics.median(xs)
                clean = f" ({len(xs)} clean)" if (case, lib) in bad else ""
                lo, hi = fmt(min(xs), metric), fmt(max(xs), metric)
                cells.append(f"{fmt(med[lib], metric)} ({lo}-{hi}){clean}")
            peers = [med[p] for p in PEERS if p in med]
            ratio = med["astream-py1e"] / best(peers) if peers and "astream-py1e" in med else None
            tail = f"{ratio:.2f}x" if ratio is not None else "-"
            out.append(f"| {wl} {w} | {name} | " + " | ".join(cells) + f" | {tail} |")
    return "\n".join(out)


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(table(p))
