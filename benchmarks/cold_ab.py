"""Interleaved A/B of astream trees on the harness's cold epoch, with CPU seconds per process.

``python -m benchmarks.cold_ab --tree before=/tmp/before --tree after=. --reps 5
--workloads images --out benchmarks/results/<date>-<commit>/coldimg-ab``

Each tree is a checkout of astream (``git archive <commit> | tar -x -C DIR``). The dataset is
written once with the current tree's writer, uploaded to moto behind the harness proxy at 0 ms
(``benchmarks.servers.S3Emulator``; ``--backend gcs``: fake-gcs-server behind the same proxy,
``GcsEmulator``), then every repetition runs each tree's
``benchmarks.runners.astream`` epoch scenario in turn (A B A B ...) with a fresh cache, exactly
the spec ``benchmarks.run`` gives the cold case (2 DataLoader workers, batch 32, shuffled).
While a run lasts, the CPU seconds of the runner, each of its DataLoader workers, moto and the
proxy are sampled (psutil, every 20 ms): where the epoch's CPU goes on a 2-core machine.
Before each run the dirty pages are written back and after it its cache is removed
(``benchmarks.run.settle_disk``). Writes ``results.json`` (every run) and prints medians.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from benchmarks.run import settle_disk
from benchmarks.servers import GcsEmulator, S3Emulator
from benchmarks.workloads import WORKLOADS, materialize, shard_bytes

ROOT = Path(__file__).resolve().parent.parent


def _cpu(p: psutil.Process) -> float:
    t = p.cpu_times()
    return float(t.user + t.system)


class CpuWatch:
    """CPU seconds of a process tree (by role) and of fixed server processes during a run."""

    def __init__(self, root: int, servers: dict[str, int]) -> None:
        self.root = root
        self.servers = {k: psutil.Process(v) for k, v in servers.items()}
        self.base = {k: _cpu(p) for k, p in self.servers.items()}
        self.tree: dict[int, float] = {}
        self.main_at_fork: float | None = None  # the runner's CPU when its first child appeared
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def _poll(self) -> None:
        while not self.stop.is_set():
            try:
                procs = [psutil.Process(self.root)]
                procs += procs[0].children(recursive=True)
            except psutil.NoSuchProcess:
                procs = []
            if len(procs) > 1 and self.main_at_fork is None:
                self.main_at_fork = self.tree.get(self.root)
            for p in procs:
                try:
                    self.tree[p.pid] = _cpu(p)
                except psutil.NoSuchProcess:
                    pass
            self.stop.wait(0.02)

    def done(self) -> dict[str, float]:
        self.stop.set()
        self.thread.join()
        out = {f"cpu_{k}_s": _cpu(p) - self.base[k] for k, p in self.servers.items()}
        main = self.tree.pop(self.root, 0.0)
        out["cpu_main_s"] = main
        # the runner after its DataLoader workers started: the epoch's share of the main process
        out["cpu_main_epoch_s"] = main - (self.main_at_fork or 0.0)
        for i, (_, v) in enumerate(sorted(self.tree.items())):
            out[f"cpu_child{i}_s"] = v
        out["cpu_children_s"] = sum(self.tree.values())
        return out


def epoch_spec(
    wl: str,
    scale: float,
    num_workers: int,
    data: Path,
    remote: str,
    cache: Path,
    proxy: str,
    shuffle_algo: str = "",
) -> dict[str, Any]:
    """The harness's cold epoch case for ``benchmarks.runners.astream`` (batch 32, seed 1234,
    shuffled): the spec ``benchmarks.run`` gives it, astream's data at ``remote``."""
    w = WORKLOADS[wl]
    spec: dict[str, Any] = {
        "lib": "astream",
        "seed": 1234,
        "batch_size": 32,
        "scenario": "epoch",
        "workload": wl,
        "cold": True,
        "num_workers": num_workers,
        "payload_kind": w.payload_kind,
        "samples": w.samples(scale),
        "shard_bytes": shard_bytes(scale),
        "data": str(data),
        "remote": remote,
        "cache": str(cache),
        "proxy": proxy,
    }
    if shuffle_algo:
        spec["shuffle_algo"] = shuffle_algo
    return spec


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.cold_ab")
    ap.add_argument("--tree", action="append", required=True, help="NAME=DIR (repeatable)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--scale", type=float, default=0.25)
    ap.add_argument("--workloads", default="images")
    ap.add_argument("--work", type=Path, default=Path("/tmp/coldimg/work"))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--num-workers", type=int, default=2)
    ap.add_argument(
        "--backend",
        choices=("s3", "gcs"),
        default="s3",
        help="moto (the harness's) or fake-gcs-server, each behind the harness proxy at 0 ms",
    )
    ap.add_argument("--latency-ms", type=float, default=0.0, help="the proxy's per-request wait")
    ap.add_argument(
        "--conn-mbps", type=float, default=0.0, help="the proxy's cap of one answer's body (MB/s)"
    )
    ap.add_argument(
        "--close", action="store_true", help="every answer closes its connection (as moto does)"
    )
    ap.add_argument(
        "--shuffle-algo",
        default="",
        help="passed to the dataset (py1e: astream at its defaults, the harness's astream-py1e)",
    )
    a = ap.parse_args()
    trees = dict(t.split("=", 1) for t in a.tree)
    work = a.work.resolve()
    env = dict(
        os.environ,
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_DEFAULT_REGION="us-east-1",
    )
    records: list[dict[str, Any]] = []
    emulator = GcsEmulator() if a.backend == "gcs" else S3Emulator()
    scheme = "gs" if a.backend == "gcs" else "s3"
    with emulator as s3:
        from benchmarks.s3util import upload_dir

        if isinstance(s3, GcsEmulator):
            env.update(STORAGE_EMULATOR_HOST=s3.endpoint)
            servers = {"gcs": s3.server_pid, "proxy": s3._procs[0].pid}
            s3.create_bucket("bench")
        else:
            env.update(S3_ENDPOINT_URL=s3.endpoint, AWS_ENDPOINT_URL=s3.endpoint)
            servers = {"moto": s3._procs[0].pid, "proxy": s3._procs[1].pid}
        for wl in a.workloads.split(","):
            w = WORKLOADS[wl]
            src = materialize(work / "sources", w, a.scale, 1234)
            data = work / "data" / "astream" / wl
            if not (data / "index.json").exists():
                spec = {"scenario": "write", "workload": wl, "source": str(src), "out": str(data)}
                spec.update(
                    lib="astream", seed=1234, batch_size=32, shard_bytes=shard_bytes(a.scale)
                )
                spec.update(payload_kind=w.payload_kind, samples=w.samples(a.scale))
                subprocess.run(
                    [sys.executable, "-m", "benchmarks.runners.astream", json.dumps(spec)],
                    cwd=ROOT,
                    env=dict(env, PYTHONPATH=str(ROOT)),
                    check=True,
                    capture_output=True,
                )
            if isinstance(s3, GcsEmulator):
                from astream.storage.sync import upload

                upload(str(data), f"gs://bench/astream/{wl}", api_root=s3.direct)
            else:
                upload_dir(s3.direct, "bench", f"astream/{wl}", data)
            s3.control(
                "config",
                latency_ms=a.latency_ms,
                bandwidth_mbps=0,
                conn_mbps=a.conn_mbps,
                close=float(a.close),
            )
            for rep in range(a.reps):
                for name, tree in trees.items():
                    cache = work / "cache" / name / wl
                    shutil.rmtree(cache, ignore_errors=True)
                    spec = epoch_spec(
                        wl,
                        a.scale,
                        a.num_workers,
                        data,
                        f"{scheme}://bench/astream/{wl}",
                        cache,
                        s3.endpoint,
                        a.shuffle_algo,
                    )
                    dirty = settle_disk()
                    before = s3.control("stats")
                    p = subprocess.Popen(
                        [sys.executable, "-m", "benchmarks.runners.astream", json.dumps(spec)],
                        cwd=tree,
                        env=dict(env, PYTHONPATH=str(Path(tree).resolve())),
                        stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE,
                        text=True,
                    )
                    watch = CpuWatch(p.pid, servers)
                    out, err = p.communicate()
                    cpu = watch.done()
                    after = s3.control("stats")
                    res: dict[str, Any] = next(
                        (json.loads(x[7:]) for x in out.splitlines() if x.startswith("RESULT ")),
                        {"status": "error", "reason": err[-800:]},
                    )
                    res.update(cpu)
                    res["dirty_mb_before"] = dirty
                    shutil.rmtree(cache, ignore_errors=True)  # see settle_disk
                    res["proxy_requests"] = after["requests"] - before["requests"]
                    res["proxy_bytes"] = after["bytes_out"] - before["bytes_out"]
                    rec = {"tree": name, "workload": wl, "rep": rep, **res}
                    records.append(rec)
                    print(
                        f"{wl} {name} rep{rep}: {res.get('status')} "
                        f"mb/s={res.get('mb_per_s', float('nan')):.1f} "
                        f"ttfb={res.get('ttfb_s', float('nan')):.3f} "
                        f"s={res.get('seconds', float('nan')):.2f} "
                        + " ".join(f"{k[4:-2]}={v:.2f}" for k, v in cpu.items()),
                        flush=True,
                    )
                    if res.get("status") != "ok":
                        print(err[-2000:], flush=True)
    a.out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {}
    for wl in a.workloads.split(","):
        for name in trees:
            rs = [r for r in records if r["tree"] == name and r["workload"] == wl]
            ok = [r for r in rs if r.get("status") == "ok"]
            keys = [k for k in ok[0] if isinstance(ok[0][k], (int, float))] if ok else []
            summary[f"{wl}/{name}"] = {
                k: statistics.median(r[k] for r in ok if k in r) for k in keys if k != "rep"
            }
            summary[f"{wl}/{name}"]["ok"] = len(ok)
            summary[f"{wl}/{name}"]["runs"] = len(rs)
    meta = {"argv": sys.argv, "trees": trees, "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    meta["backend"] = a.backend
    meta["cpus"] = os.cpu_count()
    (a.out / "results.json").write_text(
        json.dumps({"meta": meta, "summary": summary, "records": records}, indent=1)
    )
    for k, v in summary.items():
        keep = ("mb_per_s", "steady_samples_per_s", "ttfb_s", "seconds", "proxy_requests")
        print(k, {x: round(v[x], 3) for x in keep if x in v}, "ok", v["ok"], "/", v["runs"])


if __name__ == "__main__":
    main()
