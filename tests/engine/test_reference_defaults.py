"""A reference shuffle_algo with num_canonical_nodes (and shuffle_block_size) left unset takes
mosaicml-streaming 0.13.0's defaults, from the World it starts on, and keeps them in the
checkpoint (goldens: scripts/gen_mosaic_order_golden.py, ``defaults.json``, recorded from the
reference's own ``StreamingDataset._resume``)."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from astream import StreamingDataset

GOLDEN = os.path.join(os.path.dirname(__file__), "..", "order", "golden", "mosaic", "defaults.json")
with open(GOLDEN) as _f:
    CASES = json.load(_f)["cases"]


def _id(c: dict) -> str:
    return f"{c['algo']}-{'shuffle' if c['shuffle'] else 'noshuffle'}-{c['nodes']}nodes"


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_unset_num_canonical_nodes_is_the_references(
    local_dataset: Any, monkeypatch: pytest.MonkeyPatch, case: dict
) -> None:
    # rank 0 of `nodes` nodes x 2 ranks (the placement reads the launcher's variables)
    monkeypatch.setenv("WORLD_SIZE", str(2 * case["nodes"]))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")
    ds = StreamingDataset(
        local=local_dataset[0], batch_size=4, shuffle=case["shuffle"], shuffle_algo=case["algo"]
    )
    assert ds.cfg.num_canonical_nodes == case["num_canonical_nodes"]
    if case["shuffle"]:
        assert ds.plan(0).block_size == case["shuffle_block_size"]
    state = ds.state_dict(0, True)
    assert state["num_canonical_nodes"] == case["num_canonical_nodes"]
    assert state["initial_physical_nodes"] == case["nodes"]


def test_the_checkpoint_keeps_the_initial_worlds_default(
    local_dataset: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Started on 4 nodes (py1s: 256 canonical nodes), resumed on 1: the checkpoint's 256 stay,
    not the 64 a fresh start on 1 node would take."""
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")
    kw: dict[str, Any] = dict(
        local=local_dataset[0], batch_size=4, shuffle=True, shuffle_algo="py1s"
    )
    state = StreamingDataset(**kw).state_dict(40, True)
    assert state["num_canonical_nodes"] == 256
    for name in ("WORLD_SIZE", "LOCAL_WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name)
    ds = StreamingDataset(**kw)
    assert ds.cfg.num_canonical_nodes == 64
    ds.load_state_dict(state)
    assert ds.cfg.num_canonical_nodes == 256
    assert ds.plan(0).num_canonical_nodes == 256


def test_astream_algorithm_keeps_its_own_default(
    local_dataset: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 2 nodes: the default order (py1e) takes 2 canonical nodes, astream's own stays at 1
    for name, value in (("WORLD_SIZE", "4"), ("LOCAL_WORLD_SIZE", "2"), ("RANK", "0")):
        monkeypatch.setenv(name, value)
    kw: dict[str, Any] = dict(local=local_dataset[0], batch_size=4, shuffle=True)
    assert StreamingDataset(**kw).cfg.num_canonical_nodes == 2
    ds = StreamingDataset(shuffle_algo="astream", **kw)
    assert ds.cfg.num_canonical_nodes == 1
