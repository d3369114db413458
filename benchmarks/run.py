"""The benchmark harness: ``python -m benchmarks.run --scale 0.05 --out .bench/report``.

Theory of operation
-------------------
1. Sources: every workload (benchmarks/workloads.py) is generated once from ``--seed``.
2. Peers: mosaicml-streaming and litdata live in ``.bench/peers-venv`` (peers_env.py).
3. Every scenario is a list of *cases* (scenario, workload, parameters). For each case and
   each repetition, the libraries run one after the other (A B C A B C ...), each in a fresh
   subprocess of its own venv (benchmarks/runners/), which prints one ``RESULT`` JSON line.
   A library that lacks an API reports ``n/a``; a crash reports ``error`` with its reason.
   Nothing is ever filled in.
4. Reading scenarios use each library's own written copy. If astream's writer is unavailable,
   astream reads mosaic's copy (the formats are byte-compatible) and the report says so.
5. Cold scenarios run against moto behind the measuring proxy (servers.py, proxy.py); each
   run gets a fresh cache directory, removed again after it, and the proxy's counters are read
   around it. Before every run the dirty pages are written back (``settle_disk``), so that no
   run pays for the writes of the runs before it.
6. results.json keeps median/min/max of every figure; report.py writes report.md and PNGs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import physical
from benchmarks.report import summarize, write_report
from benchmarks.workloads import WORKLOADS, materialize, shard_bytes

ROOT = Path(__file__).resolve().parent.parent
LIBS = ("astream", "mosaic", "lit")
# library variants: (runner, spec overrides). The "astream" column runs astream's own block
# order, named (benchmarks/runners/astream.py ORDER; the dataset's default is the reference's
# py1e, so the column's figures stay comparable). "astream-py1e" is astream with the reference's
# shuffle algorithm at the reference's default block (= mosaic's default shuffle), for the
# matched-shuffle rows of the hot/cold scenarios (``--shuffle both``)
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "astream-py1e": ("astream", {"shuffle_algo": "py1e"}),
    # litdata at its strongest shuffle: its default FullShuffle permutes chunks, then samples
    # only inside blocks of 256 (item_shuffle_window); 0 is a full permutation inside each chunk.
    # batch_decode=0 (decode per item): its default decodes a window of rows around each item
    # read, which a full in-chunk permutation defeats (~56x slower on tokens, 2026-12-02-f89ab4c)
    "lit-full": ("lit", {"item_shuffle_window": 0, "batch_decode": 0}),
}
SHUFFLE_MODES = ("defaults", "both")
SCENARIOS = ("write", "physical", "hot", "cold", "resume", "random", "scale")
# the proxy's client connections in the cold scenario -> the case key's suffix
CONNECTIONS = {"keep-alive": "", "close": "-close"}


def shuffle_algos(libs: list[str]) -> dict[str, str]:
    """The ``shuffle_algo`` each astream column ran (recorded in results.json's meta)."""
    from benchmarks.runners.astream import ORDER

    out = {}
    for lib in libs:
        runner, over = VARIANTS.get(lib, (lib, {}))
        if runner == "astream":
            out[lib] = over.get("shuffle_algo", ORDER)
    return out


def epoch_libs(libs: list[str], shuffle: str) -> list[str]:
    """``libs`` plus, with ``--shuffle both``, each variant right after its library."""
    out = list(libs)
    if shuffle == "both":
        for variant, (runner, _) in VARIANTS.items():
            if runner in out:
                out.insert(out.index(runner) + 1, variant)
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.run", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--scale", type=float, default=0.05, help="multiplies sample counts")
    ap.add_argument("--out", type=Path, default=Path(".bench/report"))
    ap.add_argument("--work", type=Path, default=Path(".bench/work"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--libs", default=",".join(LIBS))
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--latencies-ms", default="0,20", help="cold scenario proxy latencies")
    ap.add_argument("--bandwidth-mbps", type=float, default=0.0, help="0 = no cap")
    ap.add_argument(
        "--conn-mbps",
        type=float,
        default=0.0,
        help="cold scenario: the cap of one answer's body in MB/s, as a real object store caps "
        "one connection (0 = no cap; case cold/<wl>/<ms>ms-<N>MBps)",
    )
    ap.add_argument(
        "--cold-workers",
        default="2",
        help="cold scenario: DataLoader workers, comma-separated (case suffix -w<N> unless 2)",
    )
    ap.add_argument(
        "--connections",
        default="keep-alive",
        help="cold scenario: how the proxy treats client connections, comma-separated: "
        "'keep-alive' (as a real object store; case cold/<wl>/<ms>ms) and/or 'close' (every "
        "answer closes its connection, as moto's own server does; case cold/<wl>/<ms>ms-close)",
    )
    ap.add_argument("--random-n", type=int, default=200)
    ap.add_argument("--scale-shards", default="10000,100000")
    ap.add_argument("--scale-samples", type=int, default=100_000_000)
    ap.add_argument("--peers-venv", type=Path, default=Path(".bench/peers-venv"))
    ap.add_argument("--timeout", type=float, default=900, help="per runner process, seconds")
    ap.add_argument(
        "--shuffle",
        default="defaults",
        choices=SHUFFLE_MODES,
        help="hot/cold: each library at its defaults, or 'both': also astream with the "
        "reference's shuffle_algo='py1e' and block (column astream-py1e), and litdata with "
        "item_shuffle_window=0, a full in-chunk permutation, decoding per item (column lit-full)",
    )
    a = ap.parse_args(argv)
    a.libs = [x for x in a.libs.split(",") if x]
    a.workloads = [x for x in a.workloads.split(",") if x]
    a.scenarios = [x for x in a.scenarios.split(",") if x]
    a.connections = [x for x in a.connections.split(",") if x]
    for name, allowed in (
        ("libs", LIBS),
        ("workloads", WORKLOADS),
        ("scenarios", SCENARIOS),
        ("connections", CONNECTIONS),
    ):
        bad = sorted(set(getattr(a, name)) - set(allowed))
        if bad:
            ap.error(f"--{name}: unknown {bad}; choose from {sorted(allowed)}")
    return a


def settle_disk() -> float:
    """Write back every dirty page now, so that a run never pays for the writes of the runs
    before it (the kernel writes a dirty page back about 30 s after it was written: during
    some later run); returns the MB that were still dirty or under writeback (/proc/meminfo)."""
    dirty = 0.0
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith(("Dirty:", "Writeback:")):
                    dirty += int(line.split()[1]) / 1024
    except OSError:
        pass
    os.sync()
    return dirty


class Harness:
    def __init__(self, args: argparse.Namespace) -> None:
        self.a = args
        self.work = args.work.resolve()
        self.records: list[dict[str, Any]] = []
        self.data: dict[tuple[str, str], Path] = {}  # (lib, workload) -> dataset dir
        self.data_from: dict[tuple[str, str], str] = {}
        self.python = {"astream": Path(sys.executable)}
        self.env = dict(
            os.environ,
            PYTHONPATH=str(ROOT),
            AWS_ACCESS_KEY_ID="bench",
            AWS_SECRET_ACCESS_KEY="bench",
            AWS_DEFAULT_REGION="us-east-1",
            TOKENIZERS_PARALLELISM="false",
        )
        self.s3: Any = None

    def log(self, msg: str) -> None:
        print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)

    # -- running one case ---------------------------------------------------------------
    def run_one(self, lib: str, spec: dict[str, Any]) -> dict[str, Any]:
        runner = VARIANTS[lib][0] if lib in VARIANTS else lib
        cmd = [str(self.python[runner]), "-m", f"benchmarks.runners.{runner}", json.dumps(spec)]
        try:
            p = subprocess.run(
                cmd,
                cwd=ROOT,
                env=self.env,
                capture_output=True,
                text=True,
                timeout=self.a.timeout,
            )
        except subprocess.TimeoutExpired:
            # a stall: reported apart from clean runs and from failures (report.py)
            return {"status": "stalled", "reason": f"no result after {self.a.timeout:g} s"}
        for line in reversed(p.stdout.splitlines()):
            if line.startswith("RESULT "):
                result: dict[str, Any] = json.loads(line[len("RESULT ") :])
                if result["status"] == "error":
                    self.log(f"{lib} {spec['scenario']} failed:\n{p.stderr[-2000:]}")
                return result
        return {"status": "error", "reason": f"exit {p.returncode}: {p.stderr[-500:]}"}

    def case(
        self,
        key: str,
        spec: dict[str, Any],
        libs: list[str] | None = None,
        fresh: list[str] | None = None,
    ) -> None:
        """Run ``spec`` for each library, interleaved, ``reps`` times; record every result."""
        libs = libs or self.a.libs
        for rep in range(spec.pop("reps", self.a.reps)):
            for lib in libs:
                s = self.spec_for(lib, spec)
                for k in fresh or []:
                    shutil.rmtree(s[k], ignore_errors=True)
                dirty = settle_disk()
                before = self.s3.control("stats") if self.s3 and s.get("cold") else None
                r = self.run_one(lib, s)
                if "cache" in (fresh or []):
                    # its cache's pages are never written back in another run (a write's
                    # output stays: the reading scenarios read it)
                    shutil.rmtree(s["cache"], ignore_errors=True)
                r["dirty_mb_before"] = dirty
                if before is not None and r["status"] == "ok":
                    after = self.s3.control("stats")
                    r["proxy_bytes"] = after["bytes_out"] - before["bytes_out"]
                    r["proxy_requests"] = after["requests"] - before["requests"]
                    # answers >= 400 in this run (a 412: an If-Match against another ETag)
                    r["proxy_errors"] = after["error_responses"] - before["error_responses"]
                if "yielded_ids" in r:
                    r.update(self.shuffle_scores(lib, s, r.pop("yielded_ids")))
                if spec.get("workload") and (lib, spec["workload"]) in self.data_from:
                    r["data_from"] = self.data_from[(lib, spec["workload"])]
                self.records.append({"key": key, "lib": lib, "rep": rep, **r})
                self.log(f"{key} {lib} rep{rep}: {_brief(r)}")

    def shuffle_scores(self, lib: str, spec: dict[str, Any], ids: list[int]) -> dict[str, Any]:
        """Shuffle quality of the ids a loader yielded (astream.core.quality): 0 = index
        order, ~1 = a uniform permutation; shards per batch from the copy's own index."""
        import numpy as np

        from astream.core import quality

        arr = np.asarray(ids, np.int64)
        out: dict[str, Any] = {
            "order_score": quality.index_order_score(arr),
            "displacement_score": quality.displacement_score(arr),
            "scored_ids": len(arr),
        }
        bounds = _shard_bounds(Path(spec["data"])) if spec.get("data") else None
        if bounds is not None and len(arr):
            shards = np.searchsorted(bounds, arr, side="right")
            out["shards_per_batch"] = quality.shards_per_window(shards, spec["batch_size"]).mean
        return out

    def spec_for(self, lib: str, base: dict[str, Any]) -> dict[str, Any]:
        variant = VARIANTS.get(lib)
        label, lib = lib, (variant[0] if variant else lib)
        s = {"lib": lib, "seed": self.a.seed, "batch_size": self.a.batch_size, **base}
        if variant:
            s.update(variant[1])
        wl = s.get("workload")
        if wl:
            w = WORKLOADS[wl]
            s.update(
                payload_kind=w.payload_kind,
                samples=w.samples(self.a.scale),
                shard_bytes=shard_bytes(self.a.scale),
            )
            if (lib, wl) in self.data:
                s["data"] = str(self.data[(lib, wl)])
            s["remote"] = f"s3://bench/{lib}/{wl}"
            s["cache"] = str(self.work / "cache" / label / wl)
        if self.s3 is not None:
            s["proxy"] = self.s3.endpoint
        for k in ("out", "template"):
            if k in s:
                s[k] = s[k].replace("{lib}", lib)
        return s

    # -- the scenarios ------------------------------------------------------------------
    def prepare(self) -> None:
        a = self.a
        self.sources = {
            wl: materialize(self.work / "sources", WORKLOADS[wl], a.scale, a.seed)
            for wl in a.workloads
        }
        if {"mosaic", "lit"} & set(a.libs):
            from benchmarks.peers_env import ensure_peers_venv

            py = ensure_peers_venv(a.peers_venv.resolve(), log=self.log)
            self.python.update(mosaic=py, lit=py)

    def do_write(self) -> None:
        for wl in self.a.workloads:
            out = str(self.work / "data" / "{lib}" / wl)
            self.case(
                f"write/{wl}",
                {"scenario": "write", "workload": wl, "source": str(self.sources[wl]), "out": out},
                fresh=["out"],
            )
            for lib in self.a.libs:
                ok = any(
                    r["key"] == f"write/{wl}" and r["lib"] == lib and r["status"] == "ok"
                    for r in self.records
                )
                if ok:
                    self.data[(lib, wl)] = self.work / "data" / lib / wl
            if ("astream", wl) not in self.data and ("mosaic", wl) in self.data:
                self.data[("astream", wl)] = self.data[("mosaic", wl)]
                self.data_from[("astream", wl)] = "mosaic"
        physical.compare_bytes(self)

    def do_physical(self) -> None:
        physical.sequential_reads(self)

    def epoch_libs(self) -> list[str]:
        """The hot/cold columns: every library, plus the matched-shuffle variants."""
        return epoch_libs(self.a.libs, self.a.shuffle)

    def do_hot(self) -> None:
        for wl in self.a.workloads:
            for w in (0, 2):
                self.case(
                    f"hot/{wl}/w{w}",
                    {
                        "scenario": "epoch",
                        "workload": wl,
                        "cold": False,
                        "num_workers": w,
                        "record_ids": True,
                    },
                    libs=self.epoch_libs(),
                )

    def do_cold(self) -> None:
        for ms in [float(x) for x in self.a.latencies_ms.split(",") if x]:
            for conn in self.a.connections:
                self.cold_at(ms, conn)
        self.s3.control("config", latency_ms=0, bandwidth_mbps=0, conn_mbps=0, close=0)

    def cold_at(self, ms: float, conn: str) -> None:
        """The cold cases at one latency and one connection mode (CONNECTIONS)."""
        close = int(conn == "close")
        a = self.a
        self.s3.control(
            "config",
            latency_ms=ms,
            bandwidth_mbps=a.bandwidth_mbps,
            conn_mbps=a.conn_mbps,
            close=close,
        )
        per_conn = f"-{a.conn_mbps:g}MBps" if a.conn_mbps > 0 else ""
        for wl in a.workloads:
            if wl == "tokens-zstd":
                continue
            label = f"{ms:g}ms{per_conn}{CONNECTIONS[conn]}"
            physical.raw_get(self, wl, label)
            for w in [int(x) for x in a.cold_workers.split(",") if x]:
                self.case(
                    f"cold/{wl}/{label}" + ("" if w == 2 else f"-w{w}"),
                    {
                        "scenario": "epoch",
                        "workload": wl,
                        "cold": True,
                        "num_workers": w,
                        "record_ids": True,
                    },
                    libs=self.epoch_libs(),
                    fresh=["cache"],
                )

    def do_resume(self) -> None:
        wl = "tokens" if "tokens" in self.a.workloads else self.a.workloads[0]
        self.case(
            f"resume/{wl}",
            {"scenario": "resume", "workload": wl, "num_workers": 2, "resume_fraction": 0.5},
        )

    def do_random(self) -> None:
        wl = "tokens" if "tokens" in self.a.workloads else self.a.workloads[0]
        base = {"scenario": "random", "workload": wl, "random_n": self.a.random_n}
        self.case(f"random/{wl}/hot", {**base, "cold": False})
        if self.s3 is not None:
            self.case(f"random/{wl}/cold", {**base, "cold": True}, fresh=["cache"])

    def do_scale(self) -> None:
        template = str(self.work / "data" / "{lib}" / "tokens")
        for n in [int(x) for x in self.a.scale_shards.split(",") if x]:
            per = -(-self.a.scale_samples // n)
            out = str(self.work / "scale" / "{lib}" / str(n))
            self.case(
                f"scale/{n}",
                {
                    "scenario": "scale",
                    "shards": n,
                    "per_shard": per,
                    "template": template,
                    "out": out,
                    "reps": 1,
                },
                fresh=["out"],
            )

    def upload(self) -> None:
        from benchmarks.s3util import upload_dir

        for (lib, wl), path in sorted(self.data.items()):
            if wl != "tokens-zstd":
                upload_dir(self.s3.direct, "bench", f"{lib}/{wl}", path)

    def run(self) -> dict[str, Any]:
        a = self.a
        t0 = time.perf_counter()
        self.prepare()
        from benchmarks.servers import S3Emulator

        if "write" in a.scenarios or any(
            s in a.scenarios for s in ("hot", "cold", "resume", "random", "scale")
        ):
            self.do_write()
        if "physical" in a.scenarios:
            self.do_physical()
        for name in ("hot", "resume"):
            if name in a.scenarios:
                getattr(self, f"do_{name}")()
        needs_s3 = {"cold", "random"} & set(a.scenarios)
        if needs_s3:
            with S3Emulator() as s3:
                self.s3 = s3
                # each library's documented endpoint setting (astream's S3 backend, mosaic's
                # S3_ENDPOINT_URL, boto3's AWS_ENDPOINT_URL); litdata gets storage_options
                self.env.update(S3_ENDPOINT_URL=s3.endpoint, AWS_ENDPOINT_URL=s3.endpoint)
                self.upload()
                if "cold" in a.scenarios:
                    self.do_cold()
                if "random" in a.scenarios:
                    self.do_random()
                self.s3 = None
        if "scale" in a.scenarios:
            self.do_scale()
        meta = {
            "scale": a.scale,
            "reps": a.reps,
            "seed": a.seed,
            "libs": epoch_libs(a.libs, a.shuffle),
            "shuffle": a.shuffle,
            "connections": a.connections,
            "shuffle_algo": shuffle_algos(epoch_libs(a.libs, a.shuffle)),
            "workloads": a.workloads,
            "scenarios": a.scenarios,
            "batch_size": a.batch_size,
            "shard_bytes": shard_bytes(a.scale),
            "cpus": os.cpu_count(),
            "samples": {wl: WORKLOADS[wl].samples(a.scale) for wl in a.workloads},
            "wall_s": time.perf_counter() - t0,
            "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        }
        return {"meta": meta, **summarize(self.records), "records": self.records}


def _shard_bounds(data: Path) -> Any:
    """Cumulative sample counts of the shards (MDS) or chunks (litdata) of a written copy."""
    import numpy as np

    try:
        index = json.loads((data / "index.json").read_text())
    except (OSError, ValueError):
        return None
    if "shards" in index:
        sizes = [s["samples"] for s in index["shards"]]
    elif "chunks" in index:
        sizes = [c["chunk_size"] for c in index["chunks"]]
    else:
        return None
    return np.cumsum(sizes)


def _brief(r: dict[str, Any]) -> str:
    if r["status"] != "ok":
        return f"{r['status']}: {r.get('reason', '')}"[:200]
    keys = (
        "samples_per_s",
        "mb_per_s",
        "construct_s",
        "ttfb_s",
        "resume_to_first_batch_s",
        "duplicates",
        "missing",
        "first_item_s",
        "later_item_us",
        "index_load_s",
        "resume_s",
        "order_score",
    )
    return " ".join(f"{k}={r[k]:.4g}" for k in keys if isinstance(r.get(k), (int, float)))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    results = Harness(args).run()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=1, sort_keys=True))
    write_report(results, args.out)
    print(f"report: {args.out / 'report.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
