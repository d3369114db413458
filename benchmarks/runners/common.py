"""Scenario bodies shared by every library's runner; a library plugs in through an Adapter.

Theory of operation
-------------------
A runner process gets one JSON spec, builds its library's :class:`Adapter`, and calls the
scenario function named by ``spec["scenario"]``. The scenario bodies are identical for all
libraries (same timers, same collate, same counting), so the figures differ only by what each
library's dataset/loader does. Each scenario returns a flat dict of numbers; peak RSS of the
runner's process tree (DataLoader workers included) is added to every result.

Timing rules: ``time.perf_counter``; time to first batch is measured from the creation of the
dataset object (cold: that includes fetching the index) to the first collated batch in hand.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.runners.rss import PeakRSS
from benchmarks.workloads import Source


class NotBuilt(Exception):
    """The library side of this scenario does not exist (yet); reported as n/a."""


class WrongSamples(Exception):
    """An epoch yielded a sample id the dataset does not have; reported as an error."""


class Adapter:
    name = "?"

    def write(self, spec: dict[str, Any], source: Source, out: Path) -> None:
        raise NotBuilt("write")

    def dataset(self, spec: dict[str, Any], cold: bool) -> Any:
        raise NotBuilt("dataset")

    def loader(self, spec: dict[str, Any], ds: Any, num_workers: int) -> Any:
        raise NotBuilt("loader")

    def get_item(self, ds: Any, index: int) -> dict[str, Any]:
        return ds[index]  # type: ignore[no-any-return]

    def state_dict(self, loader: Any) -> Any:
        return loader.state_dict()

    def load_state_dict(self, loader: Any, state: Any) -> None:
        loader.load_state_dict(state)

    def scale(self, spec: dict[str, Any]) -> dict[str, float]:
        raise NotBuilt("scale")


def _proxy_stats(spec: dict[str, Any]) -> dict[str, float]:
    import urllib.request

    with urllib.request.urlopen(spec["proxy"] + "/__bench__/stats") as r:
        out: dict[str, float] = json.loads(r.read())
        return out


def scenario_write(a: Adapter, spec: dict[str, Any]) -> dict[str, float]:
    source = Source(spec["source"], spec["payload_kind"])
    out = Path(spec["out"])
    t0 = time.perf_counter()
    a.write(spec, source, out)
    dt = time.perf_counter() - t0
    on_disk = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    mb = source.total_payload_bytes / 1e6
    return {"seconds": dt, "mb_per_s": mb / dt, "bytes_on_disk": on_disk}


def _consume(
    batches: Iterable[Any],
    t0: float,
    ids: list[np.ndarray],
    on_first: Callable[[], None] | None = None,
) -> dict[str, float]:
    ttfb = float("nan")
    samples = nbytes = 0
    for batch in batches:
        if samples == 0:
            ttfb = time.perf_counter() - t0
            if on_first is not None:
                on_first()  # after the time is taken: its cost is in no figure but the epoch's
        ids.append(batch["id"].numpy().copy())
        samples += len(batch["id"])
        nbytes += int(batch["offsets"][-1])
    dt = time.perf_counter() - t0
    return {"ttfb_s": ttfb, "seconds": dt, "samples": samples, "bytes": nbytes}


def scenario_epoch(a: Adapter, spec: dict[str, Any]) -> dict[str, Any]:
    ids: list[np.ndarray] = []
    # cold: the proxy's counters before the dataset is made and when the first batch is in
    # hand, so the bytes a library had the server send before its first batch are known
    counted = spec["cold"] and "proxy" in spec
    marks: list[dict[str, float]] = [_proxy_stats(spec)] if counted else []
    t0 = time.perf_counter()
    ds = a.dataset(spec, cold=spec["cold"])
    construct_s = time.perf_counter() - t0  # part of ttfb_s, reported apart
    loader = a.loader(spec, ds, spec["num_workers"])
    r = _consume(loader, t0, ids, (lambda: marks.append(_proxy_stats(spec))) if counted else None)
    seen = np.concatenate(ids) if ids else np.zeros(0, np.int64)
    bad = seen[(seen < 0) | (seen >= spec["samples"])]
    if len(bad):
        # a sample that is no sample of the dataset: the epoch delivered wrong bytes, so the
        # run is a failure, never a figure
        raise WrongSamples(
            f"{len(bad)} of {len(seen)} yielded ids outside 0..{spec['samples'] - 1} "
            f"(first {bad[:3].tolist()}): the loader delivered corrupted samples"
        )
    steady = r["seconds"] - r["ttfb_s"]
    out: dict[str, Any] = {
        **r,
        "construct_s": construct_s,
        "samples_per_s": r["samples"] / r["seconds"],
        "mb_per_s": r["bytes"] / r["seconds"] / 1e6,
        "steady_samples_per_s": (r["samples"] / steady) if steady > 0 else float("nan"),
        "unique": len(np.unique(seen)),
        "expected": spec["samples"],
        "padding": r["samples"] - len(np.unique(seen)),
    }
    if len(marks) == 2:
        out["bytes_before_first_batch"] = marks[1]["bytes_out"] - marks[0]["bytes_out"]
        out["requests_before_first_batch"] = marks[1]["requests"] - marks[0]["requests"]
    if spec.get("record_ids"):
        # the ids in the order the loader yielded them (capped): the harness scores the
        # shuffle from them (astream.core.quality) and drops them before results.json
        out["yielded_ids"] = seen[: spec.get("ids_cap", 200_000)].tolist()
    return out


def _epoch_ids(a: Adapter, spec: dict[str, Any], w: int) -> np.ndarray:
    ids: list[np.ndarray] = []
    _consume(a.loader(spec, a.dataset(spec, cold=False), w), time.perf_counter(), ids)
    return np.concatenate(ids)


def scenario_resume(a: Adapter, spec: dict[str, Any]) -> dict[str, float]:
    """Stop at ``resume_fraction`` of an epoch, resume in a fresh dataset + loader, and compare
    the ids delivered with those of an uninterrupted epoch (as multisets, so a library's
    documented end-of-epoch padding is not counted as a duplicate)."""
    w = spec["num_workers"]
    reference = _epoch_ids(a, spec, w)
    stop_at = int(len(reference) * spec.get("resume_fraction", 0.5))
    ds = a.dataset(spec, cold=False)
    loader = a.loader(spec, ds, w)
    before: list[np.ndarray] = []
    consumed = 0
    it = iter(loader)
    while consumed < stop_at:
        batch = next(it)
        before.append(batch["id"].numpy().copy())
        consumed += len(batch["id"])
    state = a.state_dict(loader)
    del it, loader, ds
    after: list[np.ndarray] = []
    t0 = time.perf_counter()
    ds2 = a.dataset(spec, cold=False)
    loader2 = a.loader(spec, ds2, w)
    a.load_state_dict(loader2, state)
    r = _consume(loader2, t0, after)
    seen = np.concatenate(before + after)
    size = int(max(seen.max(initial=0), reference.max(initial=0))) + 1
    diff = np.bincount(seen, minlength=size) - np.bincount(reference, minlength=size)
    return {
        "resume_to_first_batch_s": r["ttfb_s"],
        "consumed_before": consumed,
        "samples_after": r["samples"],
        "duplicates": int(diff[diff > 0].sum()),
        "missing": int(-diff[diff < 0].sum()),
        "same_order": float(len(seen) == len(reference) and bool((seen == reference).all())),
        "padding": len(reference) - len(np.unique(reference)),
    }


def scenario_random(a: Adapter, spec: dict[str, Any]) -> dict[str, float]:
    rng = np.random.default_rng(spec["seed"])
    idx = rng.integers(0, spec["samples"], size=spec["random_n"] + 1)
    cold = spec["cold"]
    s0 = _proxy_stats(spec) if cold else None
    ds = a.dataset(spec, cold=cold)
    t0 = time.perf_counter()
    first = a.get_item(ds, int(idx[0]))
    t_first = time.perf_counter() - t0
    assert int(first["id"]) == int(idx[0]), (first["id"], idx[0])
    s1 = _proxy_stats(spec) if cold else None
    lat = []
    for i in idx[1:]:
        t = time.perf_counter()
        item = a.get_item(ds, int(i))
        lat.append(time.perf_counter() - t)
        assert int(item["id"]) == int(i), (item["id"], i)
    out = {"first_item_s": t_first, "later_item_us": float(np.median(lat)) * 1e6}
    if cold and s0 is not None and s1 is not None:
        s2 = _proxy_stats(spec)
        out["first_item_bytes"] = s1["bytes_out"] - s0["bytes_out"]
        out["later_item_bytes"] = (s2["bytes_out"] - s1["bytes_out"]) / len(lat)
        out["requests"] = s2["requests"] - s0["requests"]
    return out


SCENARIOS: dict[str, Callable[[Adapter, dict[str, Any]], dict[str, Any]]] = {
    "write": scenario_write,
    "epoch": scenario_epoch,
    "resume": scenario_resume,
    "random": scenario_random,
    "scale": lambda a, spec: a.scale(spec),
}


def main(make_adapter: Callable[[], Adapter]) -> None:
    spec = json.loads(sys.argv[1])
    result: dict[str, Any]
    try:
        with PeakRSS() as rss:
            t0 = time.perf_counter()
            adapter = make_adapter()  # imports the library: timed apart from every scenario
            import_s = time.perf_counter() - t0
            figures = SCENARIOS[spec["scenario"]](adapter, spec)
        if isinstance(figures.get("construct_s"), float):
            # the peers import their storage SDK with the library, astream at first use:
            # construction is compared both without the library's import and with it
            figures["import_construct_s"] = import_s + figures["construct_s"]
        result = {
            "status": "ok",
            "import_s": import_s,
            **figures,
            "peak_rss_mb": rss.peak_rss / 1e6,
            "peak_pss_mb": rss.peak_pss / 1e6,
            # the peak's PSS by kind of page (benchmarks/runners/rss.py)
            **{f"peak_pss_{k}_mb": rss.peak_parts[k] / 1e6 for k in ("anon", "file", "shmem")},
        }
    except NotBuilt as e:
        result = {"status": "n/a", "reason": f"not built yet: {e}"}
    except Exception as e:  # reported, never hidden: the harness prints it
        traceback.print_exc()
        result = {"status": "error", "reason": f"{type(e).__name__}: {e}"}
    print("RESULT " + json.dumps(result), flush=True)


def write_synthetic_index(spec: dict[str, Any]) -> Path:
    """An index-only dataset for the scale scenario: ``spec["shards"]`` copies of the first
    shard entry of ``spec["template"]``, each with ``spec["per_shard"]`` samples (no data)."""
    root = Path(spec["out"])
    root.mkdir(parents=True, exist_ok=True)
    template = json.loads((Path(spec["template"]) / "index.json").read_text())["shards"][0]
    shards = []
    for i in range(spec["shards"]):
        raw = {**template["raw_data"], "basename": f"shard.{i:06d}.mds"}
        shards.append({**template, "samples": spec["per_shard"], "raw_data": raw, "zip_data": None})
    (root / "index.json").write_text(json.dumps({"shards": shards, "version": 2}))
    return root
