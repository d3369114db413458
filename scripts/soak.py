"""Soak test (not in CI): epochs through a fault-injecting proxy for N minutes.

Starts a loopback moto S3 server and a FaultProxy (503/500s, resets, truncated bodies, latency
spikes, re-drawn every epoch), writes a self-checking dataset, then runs epochs -- alternating
plain/zstd data, with and without a tight cache_limit -- until the time is up. Per epoch it
prints the wall time, samples, faults injected, and the process RSS; it reports as anomalies any
wrong or missing sample, any exception, and RSS growth over the run.

    .venv/bin/python scripts/soak.py --minutes 30
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from astream import MDSWriter, StreamingDataset
from astream.storage.sync import upload
from astream.testing import FaultProxy, MotoServer


def payload(i: int) -> bytes:
    seed = hashlib.sha256(i.to_bytes(8, "little")).digest()
    n = 40 + int.from_bytes(seed[:2], "little") % 4000
    return (seed * (n // 32 + 1))[:n]


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--samples", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    for k, v in {"AWS_ACCESS_KEY_ID": "soak", "AWS_SECRET_ACCESS_KEY": "soak"}.items():
        os.environ.setdefault(k, v)
    tmp = tempfile.mkdtemp(prefix="astream-soak-")
    server = MotoServer().start()
    bucket = f"soak-{uuid.uuid4().hex[:8]}"
    server.create_bucket(bucket)
    urls = {}
    for kind, comp in (("plain", None), ("zstd", "zstd")):
        src = os.path.join(tmp, kind)
        with MDSWriter(
            out=src,
            columns={"data": "bytes", "id": "int"},
            size_limit=200_000,
            compression=comp,
            hashes=["xxh64"],
        ) as w:
            for i in range(a.samples):
                w.write({"id": i, "data": payload(i)})
        urls[kind] = f"s3://{bucket}/{kind}"
        upload(src, urls[kind], **server.store_options())
    proxy = FaultProxy(server.url, seed=a.seed).start()
    opts = {"endpoint_url": proxy.url, "region": "us-east-1", "path_style": True}
    end = time.monotonic() + a.minutes * 60
    rss: list[float] = []
    anomalies: list[str] = []
    epoch = 0
    print("epoch kind  limit     secs  samples  faults  rss_mb", flush=True)
    while time.monotonic() < end:
        kind = ("plain", "zstd")[epoch % 2]
        limit = "16mb" if epoch % 4 >= 2 else None
        proxy.configure(
            error_rate=rng.uniform(0.0, 0.15),
            reset_rate=rng.uniform(0.0, 0.05),
            truncate_rate=rng.uniform(0.0, 0.03),
            latency=rng.choice([0.0, 0.0, 0.02, 0.1]),
        )
        proxy.reset_stats()
        local = os.path.join(tmp, f"cache-{kind}-{limit}")
        t0 = time.perf_counter()
        try:
            ds = StreamingDataset(
                remote=urls[kind],
                local=local,
                batch_size=8,
                shuffle=True,
                shuffle_seed=epoch,
                cache_limit=limit,
                download_retry=8,
                download_timeout=10,
                validate_hash="xxh64",
                storage_options=opts,
            )
            seen = []
            for s in ds:
                i = int(s["id"])
                seen.append(i)
                if bytes(s["data"]) != payload(i):
                    anomalies.append(f"epoch {epoch}: sample {i} has wrong bytes")
            if sorted(seen) != list(range(a.samples)):
                anomalies.append(f"epoch {epoch}: ids differ ({len(seen)} samples)")
            del ds
        except Exception as exc:  # report, keep soaking
            anomalies.append(f"epoch {epoch}: {type(exc).__name__}: {exc}")
            seen = []
        secs = time.perf_counter() - t0
        rss.append(rss_mb())
        faults = sum(proxy.stats.faults.values())
        print(
            f"{epoch:5d} {kind:5s} {limit or '-':8s} {secs:5.2f} {len(seen):8d} {faults:7d} "
            f"{rss[-1]:7.1f}",
            flush=True,
        )
        epoch += 1
    proxy.stop()
    server.stop()
    warm = rss[min(3, len(rss) - 1)]
    growth = rss[-1] - warm
    per_epoch = growth / max(1, len(rss) - 4)
    print(
        f"\n{epoch} epochs; RSS {rss[0]:.1f} MB after epoch 0, {warm:.1f} MB after epoch 3, "
        f"{rss[-1]:.1f} MB at the end ({growth:+.1f} MB, {per_epoch:+.3f} MB/epoch after warm-up)"
    )
    if per_epoch > 0.5:
        anomalies.append(f"RSS grows {per_epoch:.2f} MB per epoch after warm-up")
    print("anomalies:", "none" if not anomalies else "")
    for line in anomalies:
        print("  " + line)
    sys.exit(1 if anomalies else 0)


if __name__ == "__main__":
    main()
