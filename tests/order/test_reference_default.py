"""At the reference's default arguments astream is the reference: a dataset that names only
``local``, ``shuffle=True``, ``shuffle_seed`` and ``batch_size`` yields mosaicml-streaming
0.13.0's batches on every rank and DataLoader worker of each World shape, in epoch 0, in epoch
1, and resumed from the reference's own checkpoint mid-epoch (goldens:
scripts/gen_mosaic_default_golden.py, ``default.json``; the dataset is the one the reference's
``MDSWriter`` wrote for scripts/gen_mosaic_job_golden.py)."""

from __future__ import annotations

import json
import os
import shutil
from typing import Any

import pytest

from astream import StreamingDataLoader, StreamingDataset

MOSAIC = os.path.join(os.path.dirname(__file__), "golden", "mosaic")
with open(os.path.join(MOSAIC, "default.json")) as _f:
    META = json.load(_f)
CASES = META["cases"]
SHAPE_IDS = ["x".join(map(str, c["shape"])) for c in CASES]


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("default") / "data")
    shutil.copytree(os.path.join(MOSAIC, "jobs", "data"), path)
    return path


def collate(batch: list[dict[str, Any]]) -> list[int]:
    return [int(s["x"]) for s in batch]


def _as_rank(monkeypatch: pytest.MonkeyPatch, shape: list[int], rank: int) -> None:
    nodes, rpn, _ = shape
    for name, value in (
        ("RANK", rank), ("LOCAL_RANK", rank % rpn), ("WORLD_SIZE", nodes * rpn),
        ("LOCAL_WORLD_SIZE", rpn),
    ):  # fmt: skip
        monkeypatch.setenv(name, str(value))


def _loader(local: str, workers: int) -> StreamingDataLoader:
    # nothing but what the reference's users name: every order setting is the default
    ds = StreamingDataset(local=local, shuffle=True, shuffle_seed=META["seed"], batch_size=4)
    return StreamingDataLoader(ds, batch_size=4, num_workers=workers, collate_fn=collate)


@pytest.mark.parametrize("case", CASES, ids=SHAPE_IDS)
def test_defaults_resolve_as_the_reference(
    local: str, monkeypatch: pytest.MonkeyPatch, case: dict[str, Any]
) -> None:
    _as_rank(monkeypatch, case["shape"], 0)
    ds = StreamingDataset(local=local, shuffle=True, shuffle_seed=META["seed"], batch_size=4)
    got = {name: getattr(ds, name) for name in case["settings"]}
    assert got == case["settings"]
    assert ds.plan(0).block_size == case["settings"]["shuffle_block_size"]


@pytest.mark.parametrize("case", CASES, ids=SHAPE_IDS)
def test_two_epochs_at_defaults_are_the_references(
    local: str, monkeypatch: pytest.MonkeyPatch, case: dict[str, Any]
) -> None:
    workers = case["shape"][2]
    for rank, (epoch0, epoch1) in enumerate(zip(case["epoch0"], case["epoch1"])):
        _as_rank(monkeypatch, case["shape"], rank)
        loader = _loader(local, workers)
        assert list(loader) == epoch0, rank
        assert list(loader) == epoch1, rank  # the second iteration is epoch 1, as there


@pytest.mark.parametrize("case", CASES, ids=SHAPE_IDS)
def test_reference_checkpoint_at_defaults_resumes_on_astream(
    local: str, monkeypatch: pytest.MonkeyPatch, case: dict[str, Any]
) -> None:
    """The reference's checkpoint, taken at its defaults after ``stop`` global batches: each
    rank yields the reference's remainder, and what it had consumed plus that remainder is the
    uninterrupted epoch."""
    workers = case["shape"][2]
    for rank, rest in enumerate(case["resumed"]):
        _as_rank(monkeypatch, case["shape"], rank)
        loader = _loader(local, workers)
        loader.load_state_dict(dict(case["state"]))
        got = list(loader)
        assert got == rest, rank
        assert case["epoch0"][rank][: META["stop"]] + got == case["epoch0"][rank], rank


@pytest.mark.parametrize("case", CASES[:2], ids=SHAPE_IDS[:2])
def test_astream_checkpoint_at_defaults_is_the_references(
    local: str, monkeypatch: pytest.MonkeyPatch, case: dict[str, Any]
) -> None:
    """Stopped at the same batch, astream writes the reference's checkpoint (every key)."""
    _as_rank(monkeypatch, case["shape"], 0)
    loader = _loader(local, case["shape"][2])
    for j, _batch in enumerate(loader):
        if j + 1 == META["stop"]:
            break
    mine = loader.state_dict()
    assert {k: mine[k] for k in case["state"]} == case["state"]


def test_a_cache_holding_the_dataset_is_not_warned_about(
    local: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """py1e's default block is each canonical node's whole share: the shards read at once
    are every shard once, not every shard once per canonical node."""
    import warnings

    _as_rank(monkeypatch, [2, 1, 1], 0)  # 2 nodes: 2 canonical nodes
    probe = StreamingDataset(local=local, batch_size=4)
    whole = len(probe.catalog.shards) * probe.catalog.max_footprint
    kw: dict[str, Any] = dict(local=local, batch_size=4, shuffle=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        StreamingDataset(cache_limit=whole, **kw)
    with pytest.warns(UserWarning, match=f"about 19 shards over 2 canonical node.* = {whole}"):
        StreamingDataset(cache_limit=whole - 1, **kw)


def test_the_planner_plans_the_default_unshuffled_order(
    local: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``astream plan``'s "none" is the dataset's default unshuffled: on 2 nodes, 2 canonical
    nodes (each node reads its half of the shards), as StreamingDataset(shuffle=False) takes."""
    from astream.plan import simulate

    _as_rank(monkeypatch, [2, 1, 1], 0)
    ds = StreamingDataset(local=local, batch_size=4)
    assert ds.num_canonical_nodes == 2
    shards = len(ds.catalog.shards)
    (r,) = simulate(local, batch_size=4, nodes=2, shuffles=["none"])
    per_node = sorted(f.distinct_shards for f in r.epochs)
    assert sum(per_node) <= shards + 1 and per_node[-1] < shards  # halves, one shard shared
