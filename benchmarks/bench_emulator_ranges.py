"""What one small ranged GET costs on the benchmark emulators, by object size.

    python benchmarks/bench_emulator_ranges.py --out benchmarks/results/emulator-ranges/raw.json

A client (boto3 for moto, plain HTTP for fake-gcs-server, both straight to the server, no
proxy) puts one object of each size (1, 16 and 64 MiB of random bytes), then reads 2,500
bytes from its middle 15 times; the report is the median per size and server. On a server
that reads the whole object to answer a ranged GET, its time grows with the object, and a
client that reads by ranges (a first batch, random access, a download in parts) pays for it
there. The cold rows of docs/benchmarks.md are read
with this in mind.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.servers import GcsEmulator, S3Emulator

SIZES_MIB = (1, 16, 64)
READS = 15
SPAN = 2_500


def _moto(sizes: tuple[int, ...]) -> dict[str, list[float]]:
    import boto3

    out: dict[str, list[float]] = {}
    with S3Emulator() as s3:
        c = boto3.client(
            "s3",
            endpoint_url=s3.direct,
            aws_access_key_id="bench",
            aws_secret_access_key="bench",
            region_name="us-east-1",
        )
        c.create_bucket(Bucket="bench")
        for mib in sizes:
            key = f"obj-{mib}"
            c.put_object(Bucket="bench", Key=key, Body=os.urandom(mib << 20))
            at = (mib << 20) // 2
            rng = f"bytes={at}-{at + SPAN - 1}"
            times = []
            for _ in range(READS):
                t0 = time.perf_counter()
                body = c.get_object(Bucket="bench", Key=key, Range=rng)["Body"].read()
                times.append(time.perf_counter() - t0)
                assert len(body) == SPAN
            out[str(mib)] = times
    return out


def _gcs(sizes: tuple[int, ...]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    with GcsEmulator() as gcs:
        gcs.create_bucket("bench")
        base = gcs.direct.rstrip("/")
        for mib in sizes:
            name = f"obj-{mib}"
            req = urllib.request.Request(
                f"{base}/upload/storage/v1/b/bench/o?uploadType=media&name={name}",
                data=os.urandom(mib << 20),
                method="POST",
                headers={"Content-Type": "application/octet-stream"},
            )
            urllib.request.urlopen(req).read()
            at = (mib << 20) // 2
            times = []
            for _ in range(READS):
                get = urllib.request.Request(
                    f"{base}/storage/v1/b/bench/o/{name}?alt=media",
                    headers={"Range": f"bytes={at}-{at + SPAN - 1}"},
                )
                t0 = time.perf_counter()
                with urllib.request.urlopen(get) as r:
                    body = r.read()
                times.append(time.perf_counter() - t0)
                assert len(body) == SPAN
            out[str(mib)] = times
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    raw: dict[str, Any] = {"moto": _moto(SIZES_MIB), "fake-gcs-server": _gcs(SIZES_MIB)}
    report = {
        server: {mib: statistics.median(ts) * 1e3 for mib, ts in by.items()}
        for server, by in raw.items()
    }
    for server, by in report.items():
        cells = ", ".join(f"{mib} MiB: {ms:.1f} ms" for mib, ms in by.items())
        print(f"{server}: median ranged GET of {SPAN} bytes by object size: {cells}")
    if a.out:
        out = Path(a.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        doc = {"reads": READS, "span_bytes": SPAN, "median_ms": report, "seconds": raw}
        out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
