"""Cache eviction under a tight ``cache_limit``: astream next-use, astream LRU, the reference.

    .venv/bin/python -m benchmarks.bench_evict [--reps 3] [--cases tight:3:1,half:half:2]
        [--libs next_use,lru,mosaic] [--peer-python /work/peervenv/bin/python] [--out DIR]

Theory of operation
-------------------
One small MDS dataset (written by astream; the format is byte-compatible, so the reference
reads the same objects) is uploaded to the S3 emulator (moto), and every library reads it
through :class:`astream.testing.FaultProxy`, which counts each GET and each body byte per
object path: that is what a library downloaded, whatever it believes it did.

A *case* is ``name:cache_shards:epochs`` (``half``: half the dataset's shards, rounded up);
``cache_limit`` is ``cache_shards`` times the largest shard, the same number for every library.
A *run* is one case for one library: two rank processes on one node (``RANK``/``WORLD_SIZE``/
``LOCAL_WORLD_SIZE`` as torchrun sets them), each with a 2-worker StreamingDataLoader, kept in
lockstep by a gloo barrier after every batch (as gradient all-reduce keeps training ranks),
running all of the case's epochs in one process on a fresh cache directory. Between epochs the
ranks meet at a barrier, rank 0 writes ``epoch<e>.done`` and waits for the harness's
``epoch<e>.go``; meanwhile the harness takes the proxy's counters (nothing is in flight: every
worker of the finished epoch has exited), so each epoch's downloads are exact.

Every library gets the same order arguments: ``shuffle_algo`` (default ``py1e``, the
reference's default; astream implements the reference's algorithms, so both deal the very same
samples to each rank in the same order; the records keep a hash of every rank's order to show
it), ``shuffle_block_size``, ``num_canonical_nodes``, ``shuffle_seed``, ``batch_size``,
default ``predownload``. astream runs with ``cache_policy="next_use"`` and ``"lru"``; the
reference has one policy (least recently accessed, no pinning of shards in use).

Recorded per run and epoch: shard GETs (downloads) and their bytes, the most GETs of any one
shard, the cache's peak bytes (a sampling thread; top-level files but ``index.json``), the
samples each rank got (checked against an exact epoch), time to first batch and the epoch's
seconds. A run that exits non-zero is recorded as ``error`` with the message it printed (the
reference refuses a ``cache_limit`` under four times its largest shard, for example); one that
does not finish in ``--timeout`` seconds is killed and recorded as ``stalled``. astream's rows
carry the planner's prediction (:func:`astream.plan.simulate` on the same index and order).

Outputs under ``--out`` (default ``benchmarks/results/<date>-<commit>/``): ``evict.json`` (every
run's raw figures, plus the plan and the metadata) and ``evict.md`` (medians over reps).
``python -m benchmarks.bench_evict job SPEC`` is the per-rank job (either interpreter; it
imports only the library named in the spec).
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import math
import os
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ASTREAM_POLICIES = ("next_use", "lru")
LIBS = (*ASTREAM_POLICIES, "mosaic", "mosaic_room")


# -- the per-rank job (runs under astream's or the peers' interpreter) -------------------------
def _labels(batch: list[dict[str, Any]]) -> Any:
    import torch

    return torch.tensor([int(s["label"]) for s in batch])  # a tensor: mosaic's loader len()s it


def _make_loader(spec: dict[str, Any]) -> Any:
    order = {
        "shuffle": True,
        "shuffle_algo": spec["algo"],
        "shuffle_block_size": spec["block"],
        "num_canonical_nodes": spec["ncn"],
        "shuffle_seed": spec["seed"],
        "batch_size": spec["batch"],
        "cache_limit": spec["cache_limit"],
    }
    if spec["lib"].startswith("mosaic"):
        import streaming  # type: ignore[import-not-found]  # the peers' venv only

        ds = streaming.StreamingDataset(remote=spec["remote"], local=spec["local"], **order)
        mod: Any = streaming
    else:
        import astream

        ds = astream.StreamingDataset(
            remote=spec["remote"], local=spec["local"], cache_policy=spec["lib"], **order
        )
        mod = astream
    return mod.StreamingDataLoader(
        ds, batch_size=spec["batch"], num_workers=spec["workers"], collate_fn=_labels
    )


def _wait_for(path: Path, timeout: float) -> None:
    end = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > end:
            raise TimeoutError(f"no {path} after {timeout:.0f} s")
        time.sleep(0.01)


def job(spec: dict[str, Any]) -> None:
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    run = Path(spec["run_dir"])
    dist.init_process_group("gloo")
    # (no streaming.base.util.clean_stale_shared_memory: it unlinks every matching segment on
    # the machine, including those of another job's live reference dataset)
    t_build = time.perf_counter()
    loader = _make_loader(spec)
    build_s = time.perf_counter() - t_build
    epochs = []
    for e in range(spec["epochs"]):
        labels: list[int] = []
        waits: list[float] = []
        t0 = time.perf_counter()
        it = iter(loader)
        while True:
            t = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                break
            waits.append(time.perf_counter() - t)
            labels.extend(batch.tolist())
            if spec["step_ms"]:
                time.sleep(spec["step_ms"] / 1e3)
            dist.barrier()
        seconds = time.perf_counter() - t0
        del it
        epochs.append({
            "epoch": e,
            "samples": len(labels),
            "labels": labels,
            "order_sha1": hashlib.sha1(json.dumps(labels).encode()).hexdigest()[:16],
            "first_batch_s": waits[0] if waits else None,
            "wait_s": sum(waits),
            "seconds": seconds,
        })  # fmt: skip
        dist.barrier()  # every rank done with the epoch: the harness reads the counters
        if rank == 0:
            (run / f"epoch{e}.done").write_text("")
            _wait_for(run / f"epoch{e}.go", 120)
        dist.barrier()
    out = {"rank": rank, "build_s": build_s, "epochs": epochs}
    (run / f"rank{rank}.json").write_text(json.dumps(out))
    dist.destroy_process_group()


# -- the harness -------------------------------------------------------------------------------
class CachePeak:
    """Peak bytes of the cache directory's top-level files (``index.json`` excluded), sampled
    every 2 ms; under astream's cache lock when the directory has one (a consistent view)."""

    def __init__(self, local: Path, locked: bool) -> None:
        self.local = local
        self.lock = local / ".astream" / "cache.lock" if locked else None
        self.peak = 0
        self.samples = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _size(self) -> int:
        total = 0
        try:
            entries = list(os.scandir(self.local))
        except FileNotFoundError:
            return 0
        for e in entries:
            if e.name != "index.json":
                try:
                    if e.is_file():
                        total += e.stat().st_size
                except FileNotFoundError:
                    pass
        return total

    def _run(self) -> None:
        import fcntl

        while not self._stop.is_set():
            if self.lock is not None and self.lock.exists():
                fd = os.open(self.lock, os.O_RDWR)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                    size = self._size()
                finally:
                    os.close(fd)
            else:
                size = self._size()
            self.peak = max(self.peak, size)
            self.samples += 1
            time.sleep(0.002)

    def take(self) -> int:
        """The peak since the last take."""
        peak, self.peak = self.peak, 0
        return peak

    def __enter__(self) -> CachePeak:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()


def _counters(proxy: Any) -> dict[str, Any]:
    """Shard GETs per shard, shard bytes, and index bytes since the last reset; then reset."""
    with proxy._lock:  # the proxy's own lock: a consistent copy
        gets = collections.Counter(p.rsplit("/", 1)[-1] for p, _r in proxy.stats.ranges)
        nbytes = {p.rsplit("/", 1)[-1]: n for p, n in proxy.stats.bytes.items()}
    proxy.reset_stats()
    shard_gets = {k: v for k, v in gets.items() if k.startswith("shard.")}
    return {
        "downloads": sum(shard_gets.values()),
        "max_per_shard": max(shard_gets.values(), default=0),
        "shards_fetched": len(shard_gets),
        "bytes": sum(v for k, v in nbytes.items() if k.startswith("shard.")),
        "index_bytes": nbytes.get("index.json", 0),
    }


def _free_port() -> str:
    with socket.create_server(("127.0.0.1", 0)) as s:
        return str(s.getsockname()[1])


def run_one(a: argparse.Namespace, python: str, spec: dict[str, Any], proxy: Any) -> dict[str, Any]:
    """Both ranks of one run; the figures of each epoch (see module docstring)."""
    run = Path(spec["run_dir"])
    shutil.rmtree(run, ignore_errors=True)
    shutil.rmtree(spec["local"], ignore_errors=True)
    run.mkdir(parents=True)
    proxy.reset_stats()
    port = _free_port()
    cmd = [python, "-m", "benchmarks.bench_evict", "job", json.dumps(spec)]
    procs = []
    t0 = time.monotonic()
    epochs: list[dict[str, Any]] = []
    status, reason = "ok", ""
    failed_at: float | None = None
    with CachePeak(Path(spec["local"]), locked=not spec["lib"].startswith("mosaic")) as peak:
        for r in range(2):
            env = dict(
                os.environ,
                PYTHONPATH=str(ROOT),
                RANK=str(r),
                LOCAL_RANK=str(r),
                WORLD_SIZE="2",
                LOCAL_WORLD_SIZE="2",
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=port,
                S3_ENDPOINT_URL=proxy.url,
            )
            log = open(run / f"rank{r}.log", "w")  # noqa: SIM115 -- closed below
            procs.append((subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=log,
                                           start_new_session=True), log))  # fmt: skip
        while True:
            e = len(epochs)
            if (run / f"epoch{e}.done").exists():
                epochs.append({"epoch": e, **_counters(proxy), "cache_peak": peak.take()})
                (run / f"epoch{e}.go").write_text("")
                continue
            codes = [p.poll() for p, _ in procs]
            if all(c is not None for c in codes):
                break
            if any(codes) and failed_at is None:
                failed_at = time.monotonic()  # one rank failed: the other waits at a barrier
            if failed_at is not None and time.monotonic() - failed_at > 15:
                for p, _ in procs:
                    if p.poll() is None:
                        os.killpg(p.pid, 9)
                        p.wait()
                continue
            if time.monotonic() - t0 > a.timeout:
                for p, _ in procs:
                    os.killpg(p.pid, 9)
                status, reason = "stalled", f"killed after {a.timeout:.0f} s"
                for p, _ in procs:
                    p.wait()
                break
            time.sleep(0.02)
    for _p, log in procs:
        log.close()
    wall = time.monotonic() - t0
    codes = [p.returncode for p, _ in procs]
    if status == "ok" and any(codes):
        status = "error"
        reason = _error_line(run)
    out: dict[str, Any] = {"status": status, "reason": reason, "wall_s": wall, "codes": codes}
    if status != "ok":  # the traceback, kept with the record (the run directory is reused)
        logs = [(run / f"rank{r}.log").read_text(errors="replace") for r in range(2)]
        out["log_tail"] = [log.splitlines()[-25:] for log in logs]
    out["epochs"] = epochs
    if status == "ok":
        ranks = [json.loads((run / f"rank{r}.json").read_text()) for r in range(2)]
        for e, fig in enumerate(epochs):
            got = sorted(x for rk in ranks for x in rk["epochs"][e]["labels"])
            fig["samples"] = len(got)
            fig["unique"] = len(set(got))
            fig["exact"] = set(got) == set(range(spec["samples"]))
            fig["order_sha1"] = [rk["epochs"][e]["order_sha1"] for rk in ranks]
            fig["first_batch_s"] = max(rk["epochs"][e]["first_batch_s"] or 0 for rk in ranks)
            fig["seconds"] = max(rk["epochs"][e]["seconds"] for rk in ranks)
        out["build_s"] = max(rk["build_s"] for rk in ranks)
    return out


def _error_line(run: Path) -> str:
    """The exception line a rank printed (what the user would see)."""
    logs = []
    for r in range(2):
        log = run / f"rank{r}.log"
        logs.append(log.read_text(errors="replace").splitlines() if log.exists() else [])
    return _reason(logs)


def _reason(logs: list[list[str]]) -> str:
    """The last exception line of the rank that failed first: a rank whose peer died reports
    only gloo's "Connection closed by peer", which is skipped when another line exists."""
    found = []
    for lines in logs:
        found += [x.strip() for x in lines if "Error:" in x or "Exception:" in x]
    first = [x for x in found if "Connection closed by peer" not in x]
    return ((first or found or ["non-zero exit without an exception line"])[-1])[:400]


def write_dataset(out: Path, samples: int, shard_bytes: int, seed: int) -> None:
    import numpy as np

    from astream import MDSWriter

    rng = np.random.default_rng(seed)
    with MDSWriter(out=str(out), columns={"label": "int", "payload": "bytes"},
                   size_limit=shard_bytes) as w:  # fmt: skip
        for i in range(samples):
            w.write({"label": i, "payload": rng.bytes(int(rng.integers(40, 80)))})


def plan_for(src: Path, a: argparse.Namespace, limit: int, epochs: int) -> dict[str, Any]:
    from astream.plan import simulate

    got = simulate(
        str(src),
        batch_size=a.batch,
        ranks_per_node=2,
        workers=2,
        epochs=epochs,
        cache_limit=limit,
        cache_policy=ASTREAM_POLICIES,
        shuffles=[a.algo],
        shuffle_block_size=a.block,
        num_canonical_nodes=a.ncn,
        shuffle_seed=a.seed,
    )
    return {
        r.policy: [
            {"downloads": f.downloads, "bytes": f.bytes, "high_water": f.high_water,
             "redownloads": f.redownloads, "overcommit": f.overcommit}
            for f in r.epochs
        ]
        for r in got
    }  # fmt: skip


def parse_cases(text: str, n_shards: int) -> list[tuple[str, int, int]]:
    cases = []
    for item in text.split(","):
        name, shards, epochs = item.split(":")
        k = math.ceil(n_shards / 2) if shards == "half" else int(shards)
        cases.append((name, k, int(epochs)))
    return cases


def _git_short() -> str:
    try:
        cmd = ["git", "rev-parse", "--short", "HEAD"]
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True)
        return p.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _med(xs: list[float]) -> float:
    return float(statistics.median(xs)) if xs else float("nan")


def summarize(result: dict[str, Any]) -> str:
    """evict.md: per case, library and epoch, medians over the clean reps."""
    meta = result["meta"]
    total = meta["dataset_bytes"]
    lines = [
        "# Eviction benchmark (`python -m benchmarks.bench_evict`)",
        "",
        f"{meta['samples']} samples in {meta['shards']} shards ({total:,} B, largest "
        f"{meta['largest_shard']:,} B, index.json {meta['index_bytes']:,} B); 2 ranks x 2 "
        f"workers, batch {meta['batch']}, shuffle_algo={meta['algo']}, shuffle_block_size="
        f"{meta['block']}, num_canonical_nodes={meta['ncn']}, seed {meta['seed']}; "
        f"{meta['reps']} reps, libraries interleaved; {meta['cpus']} CPUs (shared, contended); "
        f"commit {meta['commit']}, {meta['date']}.",
        "",
        "Bytes are shard bytes served by the proxy over the dataset's shard bytes; downloads "
        "are shard GETs (dataset: one per shard). `max/shard`: most GETs of one shard. "
        "Medians over clean runs; `planned` is astream.plan.simulate. `cache peak`: the "
        "cache directory's files but index.json, sampled every 2 ms. mosaic counts its "
        "index.json inside cache_limit; `limit + index` runs it with the index's bytes added, "
        "so that its room for shards equals astream's.",
        "",
        "| case | cache_limit | library | epoch | downloads | max/shard | bytes / dataset "
        "| planned bytes / dataset | planned downloads | cache peak / limit | runs ok | exact |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    failures = []
    for case in result["cases"]:
        for lib in meta["libs"]:
            runs = [r for r in case["runs"] if r["lib"] == lib]
            ok = [r for r in runs if r["status"] == "ok"]
            for r in runs:
                if r["status"] != "ok":
                    why = _reason(r["log_tail"]) if r["status"] == "error" else r["reason"]
                    failures.append(f"- {case['name']} / {lib} rep {r['rep']}: **{r['status']}**"
                                    f" -- {why}")  # fmt: skip
            label = {"mosaic": "mosaic 0.13.0", "mosaic_room": "mosaic 0.13.0, limit + index"}.get(
                lib, f"astream {lib}"
            )
            limit = f"{case['cache_shards']} shards = {case['cache_limit']:,} B"
            if not ok:
                lines.append(f"| {case['name']} | {limit} | {label} | - | - | - | - | - | - | - "
                             f"| 0/{len(runs)} | - |")  # fmt: skip
                continue
            for e in range(case["epochs"]):
                figs = [r["epochs"][e] for r in ok]
                plan = case["plan"].get(lib)
                pb = f"{plan[e]['bytes'] / total:.2f}" if plan else "-"
                pd = str(plan[e]["downloads"]) if plan else "-"
                lines.append(
                    f"| {case['name']} | {limit} | {label} | {e} "
                    f"| {_med([f['downloads'] for f in figs]):.0f} "
                    f"| {_med([f['max_per_shard'] for f in figs]):.0f} "
                    f"| {_med([f['bytes'] / total for f in figs]):.2f} | {pb} | {pd} "
                    f"| {_med([f['cache_peak'] / case['cache_limit'] for f in figs]):.2f} "
                    f"| {len(ok)}/{len(runs)} | {sum(f['exact'] for f in figs)}/{len(figs)} |"
                )
    if failures:
        lines += ["", "Runs that did not finish cleanly (reported, not counted above):", ""]
        lines += failures
    wrong = [
        f"- {case['name']} / {r['lib']} rep {r['rep']} epoch {f['epoch']}: {f['samples']:,} "
        f"samples delivered, {f['unique']:,} distinct"
        for case in result["cases"]
        for r in case["runs"]
        if r["status"] == "ok"
        for f in r["epochs"]
        if not f["exact"]
    ]
    if wrong:
        lines += ["", "Clean exits whose epoch was not exact (counted above, `exact` column):", ""]
        lines += wrong
    same = _same_order(result["cases"])
    if same is not None:
        lines += ["", "Every rank's order (a hash of its labels) identical across libraries, "
                  f"cases and reps in every epoch, among exact epochs: {same}."]  # fmt: skip
    return "\n".join(lines) + "\n"


def _same_order(cases: list[dict[str, Any]]) -> bool | None:
    orders = collections.defaultdict(set)
    for case in cases:
        for r in case["runs"]:
            if r["status"] == "ok":
                for f in r["epochs"]:
                    if f["exact"]:
                        orders[f["epoch"]].add(tuple(f["order_sha1"]))
    return all(len(v) == 1 for v in orders.values()) if orders else None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["job"]:
        job(json.loads(argv[1]))
        return 0
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_evict",
                                 description=__doc__.split("\n")[0])  # fmt: skip
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--cases", default="tight:3:1,half:half:2", help="name:shards|half:epochs")
    ap.add_argument("--libs", default=",".join(LIBS))
    ap.add_argument("--samples", type=int, default=3000)
    ap.add_argument("--shard-bytes", type=int, default=5000)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--block", type=int, default=200, help="shuffle_block_size")
    ap.add_argument("--algo", default="py1e", help="shuffle_algo (every library)")
    ap.add_argument("--ncn", type=int, default=1, help="num_canonical_nodes")
    ap.add_argument("--seed", type=int, default=9176)
    ap.add_argument("--step-ms", type=float, default=0.0, help="sleep per batch (a train step)")
    ap.add_argument("--peer-python", default="/work/peervenv/bin/python")
    ap.add_argument("--timeout", type=float, default=300, help="per run, seconds")
    ap.add_argument("--work", type=Path, default=ROOT / ".bench" / "evict")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--report", type=Path, default=None, help="rewrite DIR/evict.md only")
    a = ap.parse_args(argv)
    if a.report is not None:
        result = json.loads((a.report / "evict.json").read_text())
        (a.report / "evict.md").write_text(summarize(result))
        return 0
    libs = [x for x in a.libs.split(",") if x]
    bad = sorted(set(libs) - set(LIBS))
    if bad:
        ap.error(f"--libs: unknown {bad}; choose from {list(LIBS)}")
    commit = _git_short()
    out = a.out or ROOT / "benchmarks" / "results" / f"{time.strftime('%Y-%m-%d')}-{commit}"
    from astream.storage.sync import upload
    from astream.testing import FaultProxy, MotoServer

    shutil.rmtree(a.work, ignore_errors=True)
    src = a.work / "src"
    write_dataset(src, a.samples, a.shard_bytes, a.seed)
    shard_sizes = [p.stat().st_size for p in src.iterdir() if p.name.startswith("shard.")]
    biggest = max(shard_sizes)
    meta = {
        "samples": a.samples, "shards": len(shard_sizes), "dataset_bytes": sum(shard_sizes),
        "largest_shard": biggest, "index_bytes": (src / "index.json").stat().st_size,
        "batch": a.batch, "block": a.block, "algo": a.algo, "ncn": a.ncn, "seed": a.seed,
        "step_ms": a.step_ms, "reps": a.reps, "libs": libs, "commit": commit,
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "cpus": os.cpu_count(),
        "command": "python -m benchmarks.bench_evict " + " ".join(argv),
    }  # fmt: skip
    cases = [
        {"name": n, "cache_shards": k, "cache_limit": k * biggest, "epochs": ep, "runs": [],
         "plan": plan_for(src, a, k * biggest, ep)}
        for n, k, ep in parse_cases(a.cases, len(shard_sizes))
    ]  # fmt: skip
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
                      AWS_DEFAULT_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true")  # fmt: skip
    moto = MotoServer()
    moto.start()
    try:
        moto.create_bucket("evict")
        os.environ["S3_ENDPOINT_URL"] = moto.url
        upload(str(src), "s3://evict/data")
        with FaultProxy(moto.url) as proxy:
            for rep in range(a.reps):
                for case in cases:
                    for lib in libs:
                        python = a.peer_python if lib.startswith("mosaic") else sys.executable
                        # mosaic counts index.json inside cache_limit; "mosaic_room" gets the
                        # index's bytes on top, so its room for shards equals the others'
                        room = meta["index_bytes"] if lib == "mosaic_room" else 0
                        spec = {
                            "lib": lib, "remote": "s3://evict/data",
                            "local": str(a.work / "cache" / lib), "run_dir": str(a.work / "run"),
                            "samples": a.samples, "batch": a.batch, "workers": 2,
                            "algo": a.algo, "block": a.block, "ncn": a.ncn, "seed": a.seed,
                            "cache_limit": case["cache_limit"] + room, "epochs": case["epochs"],
                            "step_ms": a.step_ms,
                        }  # fmt: skip
                        r = run_one(a, python, spec, proxy)
                        case["runs"].append({"lib": lib, "rep": rep, **r})
                        brief = [(f["downloads"], round(f["bytes"] / meta["dataset_bytes"], 2))
                                 for f in r["epochs"]]  # fmt: skip
                        print(f"[evict {time.strftime('%H:%M:%S')}] rep {rep} {case['name']} "
                              f"{lib}: {r['status']} {r['reason'][:120]} {brief} "
                              f"{r['wall_s']:.1f}s", flush=True)  # fmt: skip
    finally:
        moto.stop()
    result = {"meta": meta, "cases": cases, "same_order": _same_order(cases)}
    out.mkdir(parents=True, exist_ok=True)
    (out / "evict.json").write_text(json.dumps(result, indent=1))
    (out / "evict.md").write_text(summarize(result))
    print(f"results: {out / 'evict.json'}, {out / 'evict.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
