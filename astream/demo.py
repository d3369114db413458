"""``astream demo``: write a tokens dataset to an S3 emulator, then train a tiny model on it.

Theory of operation
-------------------
1. Store: a moto S3 server on 127.0.0.1 (``astream.testing.MotoServer``, a child process that
   stops with the demo) and a bucket, or with ``--store local`` a directory.
2. Write: ``--samples`` token sequences (uint16, 256-768 tokens, ~1 KB each; the label is the
   token range the sequence was drawn from) through ``MDSWriter`` with xxh64 hashes, uploaded
   while they are written.
3. Train: ``StreamingDataset`` (shuffled, a fresh cache dir) + ``StreamingDataLoader`` with
   ``--num-workers`` workers feed an EmbeddingBag classifier on the CPU, one SGD step a batch.
   A tqdm bar shows samples/s and MB/s fetched (from :class:`astream.metrics.Metrics`).
4. Report: time to first batch, samples/s, MB/s, cache counters, the loss going down, and
   that every sample was seen exactly once.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from typing import Any

import numpy as np

from astream.errors import ConfigError

__all__ = ["add_parser", "collate", "make_sample", "run"]

CLASSES = 8
VOCAB = 8 * 4096
SEQ = 128


def add_parser(sub: Any) -> None:
    p = sub.add_parser("demo", help="write a dataset to an S3 emulator and train through it")
    p.add_argument("--samples", type=int, default=60_000, help="samples to write (~1 KB each)")
    p.add_argument("--store", choices=["s3", "local"], default="s3")
    p.add_argument("--num-workers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--workdir", help="keep files here (default: a temp dir, deleted after)")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True)
    p.set_defaults(func=run)


def make_sample(i: int, rng: np.random.Generator) -> dict[str, Any]:
    label = i % CLASSES
    n = int(rng.integers(256, 768))
    tokens = rng.integers(label * 4096, (label + 1) * 4096, size=n, dtype=np.uint16)
    return {"id": i, "label": label, "tokens": tokens}


def collate(batch: list[dict[str, Any]]) -> dict[str, Any]:
    import torch

    tokens = np.zeros((len(batch), SEQ), dtype=np.int64)
    for row, s in zip(tokens, batch):
        t = s["tokens"][:SEQ]
        row[: len(t)] = t
    return {
        "id": torch.tensor([int(s["id"]) for s in batch]),
        "label": torch.tensor([int(s["label"]) for s in batch]),
        "tokens": torch.from_numpy(tokens),
    }


def _write(out: str, n: int, progress: bool) -> float:
    from tqdm import tqdm

    from astream import MDSWriter

    rng = np.random.default_rng(0)
    columns = {"id": "int", "label": "int", "tokens": "ndarray:uint16"}
    t0 = time.perf_counter()
    nbytes = 0
    with (
        MDSWriter(out=out, columns=columns, hashes=["xxh64"], size_limit="8mb") as w,
        tqdm(total=n, unit="samples", desc="write", disable=not progress, file=sys.stderr) as bar,
    ):
        for i in range(n):
            s = make_sample(i, rng)
            nbytes += s["tokens"].nbytes + 16
            w.write(s)
            if i % 512 == 511 or i == n - 1:
                bar.update(i + 1 - bar.n)
                bar.set_postfix_str(f"{nbytes / (time.perf_counter() - t0) / 1e6:.1f} MB/s", False)
    return nbytes / 1e6


def _train(remote: str | None, local: str, args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from tqdm import tqdm

    from astream import StreamingDataLoader, StreamingDataset
    from astream.metrics import Metrics

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.EmbeddingBag(VOCAB, 16), torch.nn.Linear(16, CLASSES))
    opt = torch.optim.SGD(model.parameters(), lr=5.0)
    t0 = time.perf_counter()
    ds = StreamingDataset(remote=remote, local=local, shuffle=True, batch_size=args.batch_size)
    metrics = Metrics(ds, interval=0.5)
    loader = StreamingDataLoader(
        ds,
        batch_size=args.batch_size,
        num_workers=args.num_workers,
        collate_fn=collate,
        worker_init_fn=metrics.worker_init_fn if args.num_workers else None,
    )
    losses: list[float] = []
    seen: list[Any] = []
    ttfb = 0.0
    bar = tqdm(
        total=len(ds), unit="samples", desc="train", disable=not args.progress, file=sys.stderr
    )
    try:
        for step, batch in enumerate(loader):
            if step == 0:
                ttfb = time.perf_counter() - t0
            loss = torch.nn.functional.cross_entropy(model(batch["tokens"]), batch["label"])
            opt.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            opt.step()
            losses.append(loss.item())
            seen.append(batch["id"].numpy())
            bar.update(len(batch["id"]))
            if step % 20 == 0:
                mb = metrics.snapshot()["bytes_fetched"] / 1e6
                bar.set_postfix_str(
                    f"{mb / (time.perf_counter() - t0):.1f} MB/s fetched, loss {losses[-1]:.3f}",
                    False,
                )
        dt = time.perf_counter() - t0
    finally:
        bar.close()
    snap = metrics.snapshot()
    text = metrics.format(snap)
    metrics.close()
    ids = np.concatenate(seen) if seen else np.zeros(0, np.int64)
    return {"seconds": dt, "ttfb": ttfb, "ids": ids, "losses": losses, "snap": snap, "text": text}


def run(args: argparse.Namespace) -> int:
    if args.samples < 1:
        raise ConfigError(f"--samples must be >= 1, got {args.samples}")
    work = args.workdir or tempfile.mkdtemp(prefix="astream-demo-")
    os.makedirs(work, exist_ok=True)
    server: Any = None
    try:
        if args.store == "s3":
            from astream.testing.servers import MotoServer

            print("starting an S3 emulator (moto) on 127.0.0.1 ...", flush=True)
            server = MotoServer().start()
            os.environ.update(server.env())
            os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
            server.create_bucket("astream-demo")
            out: str = "s3://astream-demo/tokens"
        else:
            out = os.path.join(work, "tokens")
            shutil.rmtree(out, ignore_errors=True)
        print(f"writing {args.samples} samples to {out} ...", flush=True)
        mb = _write(out, args.samples, args.progress)
        cache = os.path.join(work, "cache")
        shutil.rmtree(cache, ignore_errors=True)
        remote = out if args.store == "s3" else None
        local = cache if args.store == "s3" else out
        print(f"training through StreamingDataLoader ({args.num_workers} workers) ...", flush=True)
        r = _train(remote, local, args)
        n = len(r["ids"])
        pad = 0  # one rank yields the epoch exactly, the last batch partial (docs/order.md)
        head = r["ids"][: args.samples]
        exact = n == args.samples + pad and len(np.unique(head)) == args.samples
        first = float(np.mean(r["losses"][:10]))
        last = float(np.mean(r["losses"][-10:]))
        print(f"dataset        {args.samples} samples, {mb:.1f} MB of tokens at {out}")
        print(f"first batch    {r['ttfb']:.2f} s after the dataset was created")
        print(
            f"throughput     {n / r['seconds']:.0f} samples/s, "
            f"{r['snap']['bytes_fetched'] / r['seconds'] / 1e6:.1f} MB/s fetched "
            f"({n} samples in {r['seconds']:.2f} s)"
        )
        print(f"cache          {r['text']}")
        print(f"training       loss {first:.3f} -> {last:.3f} over {len(r['losses'])} steps")
        print(
            f"epoch          every sample exactly once: {'yes' if exact else 'NO'} "
            f"(+{pad} padding samples to fill the last batch)"
        )
        return 0 if exact else 1
    finally:
        if server is not None:
            server.stop()
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
