"""Index load at scale: ``python -m benchmarks.bench_index --shards 10000,100000 --reps 3``.

Theory of operation
-------------------
A synthetic MDS ``index.json`` of N shards (copies of one ``tokens`` shard entry, 1,000
samples each; no shard data: only the index is read) is written to local disk and uploaded to
moto on loopback (benchmarks/servers.py). Each measurement runs in a fresh subprocess, so the
figures include nothing a previous run left in memory, and reports:

- ``construct_s``: ``StreamingDataset(...)`` construction (the import of astream, timed apart
  as ``import_s``, excluded), which is index fetch + parse + catalog + the construction checks;
- ``import_construct_s``: the two together. Every library's figure is given both ways, since
  they import their storage SDK at different times (the reference imports boto3 when
  ``streaming`` is imported; astream imports aiobotocore when a dataset first reaches S3);
- ``construct_cpu_s``: the CPU seconds of the process (all threads) during construction: on a
  contended machine, where wall times stretch with the load, the steadier figure;
- ``peak_rss_mb``: the kernel's high-water RSS of the process (``ru_maxrss``, exact);
- ``peak_pss_mb``: the highest PSS seen by sampling /proc every 10 ms (a lower bound).

Modes: ``local`` (``local=dir``), ``s3-first`` (``remote=s3://...`` with an empty cache
directory: fetch, parse, write the local copy, its compact copy and the binding), ``s3-again``
(the same cache directory again: HEAD, fetch, compare with the local copy, load the compact
copy; the ETag is recorded), ``s3-warm`` (a third time: a HEAD, and the compact copy). With
``--peer-python`` (a venv holding mosaicml-streaming 0.13.0, e.g. /work/peervenv/bin/python)
the reference loads the same index.json from local disk in the same way (``mosaic-local``).
litdata's figure at scale comes from ``python -m benchmarks.run --scenarios scale`` (its own
index format).

Results (medians and every run) go to ``--out`` as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = {
    "column_encodings": ["int", "int", "ndarray:uint16"],
    "column_names": ["id", "label", "payload"],
    "column_sizes": [8, 8, None],
    "compression": None,
    "format": "mds",
    "hashes": [],
    "raw_data": {"basename": "shard.00000.mds", "bytes": 67_100_000, "hashes": {}},
    "samples": 1000,
    "size_limit": 1 << 26,
    "version": 2,
    "zip_data": None,
}


def write_index(root: Path, n: int) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    shards = [
        {**TEMPLATE, "raw_data": {**TEMPLATE["raw_data"], "basename": f"shard.{i:06d}.mds"}}
        for i in range(n)
    ]
    (root / "index.json").write_text(json.dumps({"shards": shards, "version": 2}, sort_keys=True))
    return root


def _pss_kb() -> int:
    try:
        with open("/proc/self/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """One measurement, in this (fresh) process."""
    peak = [_pss_kb()]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.01):
            peak[0] = max(peak[0], _pss_kb())

    t0 = time.perf_counter()
    if spec["lib"] == "astream":
        from astream import StreamingDataset as cls
    else:
        from streaming import StreamingDataset as cls  # type: ignore[import-not-found,no-redef]
    import_s = time.perf_counter() - t0
    kw: dict[str, Any] = {"shuffle": True, "shuffle_seed": 7, "batch_size": 32}
    if spec.get("remote"):
        kw.update(remote=spec["remote"], local=spec["cache"])
    else:
        kw.update(local=spec["local"])
    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    t1 = time.perf_counter()
    c1 = time.process_time()
    ds = cls(**kw)
    construct_s = time.perf_counter() - t1
    construct_cpu_s = time.process_time() - c1
    n = ds.num_samples
    stop.set()
    thread.join()
    peak[0] = max(peak[0], _pss_kb())
    return {
        "import_s": import_s,
        "construct_s": construct_s,
        "import_construct_s": import_s + construct_s,
        "construct_cpu_s": construct_cpu_s,
        "samples": int(n),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "peak_pss_mb": peak[0] / 1024,
    }


def _run(python: str, spec: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    cmd = [python, "-m", "benchmarks.bench_index", "--child", json.dumps(spec)]
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("RESULT "):
            out: dict[str, Any] = json.loads(line[7:])
            return out
    return {"error": f"exit {p.returncode}: {p.stderr[-800:]}"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_index", description=__doc__)
    ap.add_argument("--shards", default="10000,100000")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--modes", default="local,s3-first,s3-again,s3-warm")
    ap.add_argument("--peer-python", default=None, help="python of a venv with mosaic 0.13.0")
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print("RESULT " + json.dumps(child(json.loads(a.child))), flush=True)
        return 0
    modes = [m for m in a.modes.split(",") if m]
    work = a.work or Path(tempfile.mkdtemp(prefix="bench_index."))
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_DEFAULT_REGION="us-east-1",
    )
    runs: list[dict[str, Any]] = []
    from benchmarks.servers import S3Emulator

    with S3Emulator() as s3:
        env.update(S3_ENDPOINT_URL=s3.direct, AWS_ENDPOINT_URL=s3.direct)
        for n in [int(x) for x in a.shards.split(",") if x]:
            local = write_index(work / f"idx{n}", n)
            if any(m.startswith("s3") for m in modes):
                from benchmarks.s3util import upload_dir

                upload_dir(s3.direct, "bench", f"idx{n}", local)
            for rep in range(a.reps):
                cache = work / f"cache{n}"
                shutil.rmtree(cache, ignore_errors=True)
                for mode in modes:
                    spec: dict[str, Any] = {"lib": "astream", "local": str(local)}
                    if mode.startswith("s3"):
                        spec.update(remote=f"s3://bench/idx{n}", cache=str(cache))
                    r = _run(sys.executable, spec, env)
                    runs.append({"shards": n, "mode": mode, "lib": "astream", "rep": rep, **r})
                    print(f"[bench_index] {n} {mode} astream rep{rep}: {r}", flush=True)
                if a.peer_python and "local" in modes:
                    spec = {"lib": "mosaic", "local": str(local)}
                    r = _run(a.peer_python, spec, env)
                    runs.append({"shards": n, "mode": "local", "lib": "mosaic", "rep": rep, **r})
                    print(f"[bench_index] {n} local mosaic rep{rep}: {r}", flush=True)
    summary: dict[str, Any] = {}
    for r in runs:
        key = f"{r['lib']}/{r['mode']}/{r['shards']}"
        summary.setdefault(key, {"n": 0, "errors": 0})
        if "error" in r:
            summary[key]["errors"] += 1
            continue
        summary[key]["n"] += 1
    for key in summary:
        lib, mode, n = key.split("/")
        ok = [r for r in runs if (r["lib"], r["mode"], str(r["shards"])) == (lib, mode, n)]
        ok = [r for r in ok if "error" not in r]
        for metric in (
            "construct_s",
            "import_s",
            "import_construct_s",
            "construct_cpu_s",
            "peak_rss_mb",
            "peak_pss_mb",
        ):
            vals = [r[metric] for r in ok]
            if vals:
                summary[key][metric] = statistics.median(vals)
    result = {
        "command": "python -m benchmarks.bench_index " + " ".join(argv or sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "cpus": os.cpu_count(),
        "summary": summary,
        "runs": runs,
    }
    text = json.dumps(result, indent=1, sort_keys=True)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text + "\n")
    for key, s in sorted(summary.items()):
        figs = " ".join(f"{k}={v:.3g}" for k, v in s.items() if isinstance(v, float))
        print(f"{key}: {figs} (n={s['n']}, errors={s['errors']})")
    if a.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
