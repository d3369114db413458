#!/usr/bin/env python
"""Regenerate tests/writer/golden/spark_reference.json with the reference's dataframe_to_mds.

Usage:  python scripts/gen_spark_golden.py [--peer-python /work/peervenv/bin/python]

Runs (under the peer venv: mosaicml-streaming 0.13.0 + pyspark) the reference's
``dataframe_to_mds`` on the DataFrame of tests/writer/spark_frame.py in a local[2] Spark, and
records, per partition in merge order, each shard's sample count and the SHA-256 of its raw
(decompressed) and stored bytes. The tests write the same DataFrame with astream and compare
shard by shard: equal raw bytes mean equal samples, in the same order and shard boundaries.
"""

from __future__ import annotations

try:
    import peer  # run as a script: scripts/ is sys.path[0]
except ImportError:
    from scripts import peer

import hashlib
import json
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WRITER_TESTS = os.path.join(ROOT, "tests", "writer")
OUT = os.path.join(WRITER_TESTS, "golden", "spark_reference.json")


def _inner() -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    import spark_frame as sf
    import zstd  # the reference's own compressor dependency
    from pyspark.sql import SparkSession
    from streaming.base.converters import dataframe_to_mds

    spark = (
        SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    df = sf.build(spark)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out")
        dataframe_to_mds(df, mds_kwargs={"out": out, "size_limit": sf.SIZE_LIMIT})
        with open(os.path.join(out, "index.json")) as f:
            index = json.load(f)
        parts: dict[str, list[dict[str, object]]] = {}
        for shard in index["shards"]:
            zname = shard["zip_data"]["basename"]
            part, base = zname.split("/")
            with open(os.path.join(out, zname), "rb") as f:
                stored = f.read()
            raw = zstd.decompress(stored)
            parts.setdefault(part, []).append(
                {
                    "basename": base,
                    "samples": shard["samples"],
                    "raw_sha256": hashlib.sha256(raw).hexdigest(),
                    "stored_sha256": hashlib.sha256(stored).hexdigest(),
                }
            )
    spark.stop()
    result = {
        "generator": "scripts/gen_spark_golden.py (mosaicml-streaming 0.13.0 dataframe_to_mds)",
        "rows": sf.ROWS,
        "partitions": sf.PARTITIONS,
        "size_limit": sf.SIZE_LIMIT,
        "compression": "zstd",
        "columns": sf.COLUMNS,
        "parts": list(parts.values()),  # in the merged index's order = partition order
    }
    with open(OUT, "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"wrote {OUT}: {len(parts)} parts, {len(index['shards'])} shards")


if __name__ == "__main__":
    raise SystemExit(peer.main(__file__, __doc__, _inner, pythonpath=[WRITER_TESTS]))
