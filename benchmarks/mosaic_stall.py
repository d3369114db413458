"""Why mosaic stalls behind the proxy and not against moto alone: one cold-images epoch of
mosaic (2 workers, its defaults), repeated, against three endpoints:

- ``direct``: moto's own server, which answers every request with ``Connection: close``;
- ``keep-alive``: the harness's proxy at its default (connections kept alive, as S3 does);
- ``close``: the same proxy answering ``Connection: close`` (``--connections close``).

``python -m benchmarks.mosaic_stall --scale 0.25 --reps 4 --out DIR``. Writes ``runs.json``
(every run: status, time to first batch, MB/s, and through the proxy the requests and the
answers >= 400) and, with ``BENCH_PROXY_LOG=1``, the proxy's request log on stderr.

The mechanism this isolates: mosaic's dataset fetches ``index.json`` in the parent process with
a boto3 client, whose pooled connection stays open under keep-alive. The DataLoader forks its
workers; each inherits the client and that same socket, and both send their first requests on
it. Answers then reach the wrong worker: a HEAD's ETag from another shard (the ranged GET's
If-Match fails: 412), a body read by the other process (a read that waits for
``download_timeout``, 60 s), or a shard's bytes of the wrong length (an IndexError later).
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path
from typing import Any

from benchmarks.run import Harness, parse_args
from benchmarks.s3util import upload_dir
from benchmarks.servers import S3Emulator

MODES = ("direct", "keep-alive", "close")


def _one(h: Harness, s3: S3Emulator, mode: str, rep: int) -> dict[str, Any]:
    endpoint = s3.direct if mode == "direct" else s3.endpoint
    h.env.update(S3_ENDPOINT_URL=endpoint, AWS_ENDPOINT_URL=endpoint)
    s3.control("config", close=int(mode == "close"))
    spec = h.spec_for(
        "mosaic",
        {"scenario": "epoch", "workload": "images", "cold": True, "num_workers": 2},
    )
    shutil.rmtree(spec["cache"], ignore_errors=True)
    before = s3.control("stats")
    t0 = time.perf_counter()
    r = h.run_one("mosaic", spec)
    after = s3.control("stats")
    out = {
        "mode": mode,
        "rep": rep,
        "wall_s": time.perf_counter() - t0,
        "status": r["status"],
        "reason": r.get("reason", "")[-300:],
        **{k: r.get(k) for k in ("construct_s", "ttfb_s", "seconds", "mb_per_s", "unique")},
    }
    if mode != "direct":  # direct requests bypass the proxy's counters
        out["proxy_requests"] = after["requests"] - before["requests"]
        out["proxy_errors"] = after["error_responses"] - before["error_responses"]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.mosaic_stall")
    ap.add_argument("--scale", type=float, default=0.25)
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--work", type=Path, default=Path(".bench/mosaic-stall"))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--timeout", type=float, default=200)
    a = ap.parse_args(argv)
    modes = [m for m in a.modes.split(",") if m]
    bad = sorted(set(modes) - set(MODES))
    if bad:
        ap.error(f"--modes: unknown {bad}; choose from {list(MODES)}")
    h = Harness(
        parse_args(
            [
                f"--scale={a.scale}",
                "--libs=mosaic",
                "--workloads=images",
                f"--work={a.work}",
                f"--timeout={a.timeout}",
                "--reps=1",
            ]
        )
    )
    h.prepare()
    h.do_write()
    runs = []
    with S3Emulator() as s3:
        upload_dir(s3.direct, "bench", "mosaic/images", h.data[("mosaic", "images")])
        for rep in range(a.reps):
            for mode in modes:  # interleaved, as the harness runs libraries
                r = _one(h, s3, mode, rep)
                h.log(json.dumps(r))
                runs.append(r)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "runs.json").write_text(json.dumps({"scale": a.scale, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
