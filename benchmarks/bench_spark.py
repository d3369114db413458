"""dataframe_to_mds throughput: astream's beside the reference's, same DataFrame and partitions.

Usage:  python -m benchmarks.bench_spark [--rows 100000] [--partitions 4] [--repeat 3]
        [--peer-python /work/peervenv/bin/python] [--out results.json] [--ray]

Each side runs in its own process (astream in this python, the reference in the peer venv with
mosaicml-streaming 0.13.0 + pyspark), in a local[2] Spark: the DataFrame of
tests/writer/spark_frame.py (14 columns, every Spark type that maps to an MDS encoding) is
cached and counted first, then ``dataframe_to_mds`` writes it ``--repeat`` times to a fresh local
directory (zstd, the reference's default). Reported per side: median seconds, rows/s, and MB/s of
raw (uncompressed) shard bytes; then the ratio astream / reference. ``--ray`` adds astream's Ray
datasink (``astream.ray.MDSDatasink``) on the same rows: the frame is collected once as Arrow,
made a Ray Dataset of ``--partitions`` blocks in a local 2-CPU Ray, and written ``--repeat``
times (zstd); the reference has no Ray writer, so its ratio is to the reference's Spark run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FRAME_DIR = os.path.join(ROOT, "tests", "writer")


def _ray_side(rows: int, partitions: int, repeat: int) -> dict[str, object]:
    """astream's Ray datasink on the same rows: the Spark frame, collected once as Arrow."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    sys.path.insert(0, FRAME_DIR)
    sys.path.insert(0, ROOT)
    import ray
    import spark_frame as sf
    from pyspark.sql import SparkSession

    from astream.ray import MDSDatasink

    spark = (
        SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    table = sf.build(spark, rows=rows, partitions=partitions).toArrow()
    spark.stop()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    ds = ray.data.from_arrow(table).repartition(partitions).materialize()
    times, raw_bytes = [], 0
    for _ in range(repeat):
        tmp = tempfile.mkdtemp(prefix="bench-ray-")
        out = os.path.join(tmp, "out")
        t0 = time.perf_counter()
        sink = MDSDatasink(out, sf.COLUMNS, compression="zstd", size_limit=sf.SIZE_LIMIT)
        ds.write_datasink(sink)
        times.append(time.perf_counter() - t0)
        with open(os.path.join(out, "index.json")) as f:
            raw_bytes = sum(s["raw_data"]["bytes"] for s in json.load(f)["shards"])
        shutil.rmtree(tmp)
    ray.shutdown()
    med = statistics.median(times)
    return {
        "side": "astream-ray",
        "seconds": times,
        "median_s": med,
        "rows_per_s": rows / med,
        "raw_mb_per_s": raw_bytes / med / 1e6,
    }


def _side(which: str, rows: int, partitions: int, repeat: int) -> dict[str, object]:
    if which == "astream-ray":
        return _ray_side(rows, partitions, repeat)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    sys.path.insert(0, FRAME_DIR)
    import spark_frame as sf
    from pyspark.sql import SparkSession

    if which == "astream":
        sys.path.insert(0, ROOT)
        from astream.spark import dataframe_to_mds
    else:
        from streaming.base.converters import dataframe_to_mds
    spark = (
        SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    df = sf.build(spark, rows=rows, partitions=partitions).cache()
    df.count()
    times, raw_bytes = [], 0
    for _ in range(repeat):
        tmp = tempfile.mkdtemp(prefix="bench-spark-")
        out = os.path.join(tmp, "out")
        t0 = time.perf_counter()
        dataframe_to_mds(df, mds_kwargs={"out": out, "size_limit": sf.SIZE_LIMIT})
        times.append(time.perf_counter() - t0)
        with open(os.path.join(out, "index.json")) as f:
            raw_bytes = sum(s["raw_data"]["bytes"] for s in json.load(f)["shards"])
        shutil.rmtree(tmp)
    spark.stop()
    med = statistics.median(times)
    return {
        "side": which,
        "seconds": times,
        "median_s": med,
        "rows_per_s": rows / med,
        "raw_mb_per_s": raw_bytes / med / 1e6,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--peer-python", default="/work/peervenv/bin/python")
    ap.add_argument("--out")
    ap.add_argument(
        "--side", choices=["astream", "reference", "astream-ray"], help=argparse.SUPPRESS
    )
    ap.add_argument("--ray", action="store_true", help="also time astream's Ray datasink")
    a = ap.parse_args()
    if a.side:
        print(json.dumps(_side(a.side, a.rows, a.partitions, a.repeat)))
        return 0
    results = []
    sides = [("astream", sys.executable), ("reference", a.peer_python)]
    if a.ray:
        sides.append(("astream-ray", sys.executable))
    for side, py in sides:
        cmd = [py, os.path.abspath(__file__), "--side", side, "--rows", str(a.rows),
               "--partitions", str(a.partitions), "--repeat", str(a.repeat)]  # fmt: skip
        env = dict(os.environ)
        if side == "reference":
            from scripts import peer

            with tempfile.TemporaryDirectory() as stub:
                for rel, text in peer.STUBS.items():
                    path = os.path.join(stub, rel)
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    with open(path, "w") as f:
                        f.write(text)
                env["PYTHONPATH"] = stub
                proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        else:
            env["PYTHONPATH"] = ROOT
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode:
            sys.stderr.write(proc.stderr[-4000:])
            raise SystemExit(f"bench_spark: the {side} side failed (exit {proc.returncode})")
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    ours, ref = results[:2]
    summary = {
        "rows": a.rows,
        "partitions": a.partitions,
        "results": results,
        "speedup_rows_per_s": ours["rows_per_s"] / ref["rows_per_s"],  # type: ignore[operator]
    }
    if a.ray:
        summary["ray_vs_reference_rows_per_s"] = (
            results[2]["rows_per_s"] / ref["rows_per_s"]  # type: ignore[operator]
        )
    text = json.dumps(summary, indent=1)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
