"""GPU feed check: how much of a real training step's time is spent waiting for data.

``python -m benchmarks.gpu_feed [--libs astream,mosaic] [--workers 8] [--steps 200]``

Theory of operation
-------------------
One MDS "tokens" dataset (written once by astream's writer; both libraries read MDS) feeds a
small bf16 language-model step on the CUDA device: embedding, a few transformer encoder
layers, a vocabulary projection, cross-entropy, backward, AdamW. Each step measures the time
blocked in ``next(loader)`` plus the host-to-device copy (the *wait*) and the compute, closed
by ``torch.cuda.synchronize()``. The report is ``wait / (wait + compute)`` over the steps after
warm-up, per library, each library in its own process (mosaic in the peers' venv).

Without a CUDA device it says so and exits 0: CI has no GPU.
"""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SEQ = 1024
VOCAB = 50_000
# the order each library runs, named: astream its own block order (the order this check has
# always run it in; the dataset's default is the reference's py1e), mosaic its default py1e
ORDERS = {"astream": "astream", "mosaic": "py1e"}


def _tokens(batch: dict[str, Any], device: Any) -> Any:
    import torch

    payload, offsets = batch["payload"], batch["offsets"].tolist()
    rows = torch.zeros((len(offsets) - 1, SEQ), dtype=torch.int64)
    for i in range(len(offsets) - 1):
        ids = payload[offsets[i] : offsets[i + 1]].view(torch.int16).to(torch.int64) & 0xFFFF
        n = min(SEQ, ids.numel())
        rows[i, :n] = ids[:n]
    return rows.pin_memory().to(device, non_blocking=True)


def _model(device: Any) -> Any:
    import torch
    from torch import nn

    layer = nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True)
    return nn.Sequential(
        nn.Embedding(VOCAB, 512), nn.TransformerEncoder(layer, 4), nn.Linear(512, VOCAB)
    ).to(device, dtype=torch.bfloat16)


def feed(spec: dict[str, Any]) -> dict[str, float]:
    """Run in the library's own process: train ``steps`` steps, return the wait fraction."""
    import torch

    from benchmarks.collate import collate

    device = torch.device("cuda")
    lib = importlib.import_module("streaming" if spec["lib"] == "mosaic" else "astream")
    ds = lib.StreamingDataset(
        local=spec["data"], shuffle=True, batch_size=spec["batch_size"],
        shuffle_algo=ORDERS[spec["lib"]],
    )  # fmt: skip
    loader = lib.StreamingDataLoader(
        ds, batch_size=spec["batch_size"], num_workers=spec["workers"], collate_fn=collate
    )
    model = _model(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    wait = compute = 0.0
    done = 0
    while done < spec["steps"] + spec["warmup"]:
        it = iter(loader)
        while done < spec["steps"] + spec["warmup"]:
            t0 = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                break
            x = _tokens(batch, device)
            torch.cuda.synchronize()
            t1 = time.perf_counter()
            logits = model(x[:, :-1])
            loss = torch.nn.functional.cross_entropy(
                logits.reshape(-1, VOCAB).float(), x[:, 1:].reshape(-1)
            )
            loss.backward()  # type: ignore[no-untyped-call]
            opt.step()
            opt.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            if done >= spec["warmup"]:
                wait += t1 - t0
                compute += t2 - t1
            done += 1
    steps = done - spec["warmup"]
    total = wait + compute
    return {
        "steps": steps,
        "wait_fraction": wait / total,
        "step_ms": 1e3 * total / steps,
        "compute_ms": 1e3 * compute / steps,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gpu_feed")
    ap.add_argument("--libs", default="astream,mosaic")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--scale", type=float, default=0.1)
    ap.add_argument("--work", type=Path, default=Path(".bench/gpu_feed"))
    ap.add_argument("--peers-venv", type=Path, default=Path(".bench/peers-venv"))
    ap.add_argument("--spec", help=argparse.SUPPRESS)  # internal: one library's run
    a = ap.parse_args(argv)
    if a.spec:
        print("RESULT " + json.dumps(feed(json.loads(a.spec))), flush=True)
        return 0
    import torch

    if not torch.cuda.is_available():
        print("gpu_feed: no CUDA device here; this check runs only where a GPU is present.")
        return 0
    from benchmarks.workloads import WORKLOADS, Source, materialize, shard_bytes

    wl = WORKLOADS["tokens"]
    data = (a.work / "data").resolve()
    if not (data / "index.json").exists():
        from astream import MDSWriter

        src = Source(materialize(a.work / "sources", wl, a.scale, 1234), wl.payload_kind)
        from benchmarks.workloads import mds_columns

        with MDSWriter(out=str(data), columns=mds_columns(wl),
                       size_limit=shard_bytes(a.scale), exist_ok=True) as w:  # fmt: skip
            for i in range(len(src)):
                w.write(src[i])
    print(f"gpu_feed on {torch.cuda.get_device_name(0)}, {a.workers} workers, batch {a.batch_size}")
    for lib in a.libs.split(","):
        py = sys.executable if lib == "astream" else str(a.peers_venv / "bin" / "python")
        if lib != "astream":
            from benchmarks.peers_env import ensure_peers_venv

            ensure_peers_venv(a.peers_venv.resolve())
        spec = {"lib": lib, "data": str(data), "workers": a.workers, "steps": a.steps,
                "warmup": a.warmup, "batch_size": a.batch_size}  # fmt: skip
        p = subprocess.run([py, "-m", "benchmarks.gpu_feed", "--spec", json.dumps(spec)],
                           cwd=ROOT, capture_output=True, text=True)  # fmt: skip
        lines = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
        if not lines:
            print(f"{lib}: failed\n{p.stderr[-2000:]}")
            continue
        r = json.loads(lines[-1][7:])
        print(f"{lib} (shuffle_algo={ORDERS[lib]}): waiting for data "
              f"{100 * r['wait_fraction']:.1f}% of step time "
              f"(step {r['step_ms']:.1f} ms, compute {r['compute_ms']:.1f} ms, "
              f"{r['steps']} steps)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
