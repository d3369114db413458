"""Checkpoint arithmetic that earlier tests could not catch: each test here fails on a named
mutation of astream/dataset.py (see docs/reliability.md, "Nothing lost, nothing wrong").

- a second checkpoint taken after a resume must count from the epoch's start, not from the
  resume point (mutation: ``pos = ... else int(num_samples)``, dropping ``start +``);
- a checkpoint's ``shuffle_seed`` / ``num_canonical_nodes`` must be adopted by a dataset built
  with the defaults (mutation: ``load_state_dict`` ignoring them).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from astream import MDSWriter, StreamingDataLoader, StreamingDataset

N = 1000


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("mut") / "ds")
    with MDSWriter(out=path, columns={"label": "int", "pad": "bytes"}, size_limit=6_000) as w:
        for i in range(N):
            w.write({"label": i, "pad": bytes(40)})
    return path


def collate(batch: list[dict[str, Any]]) -> list[int]:
    return [int(s["label"]) for s in batch]


def make(path: str, workers: int = 0, bs: int = 8, **kw: Any) -> StreamingDataLoader:
    ds = StreamingDataset(local=path, batch_size=bs, shuffle=True, **kw)
    return StreamingDataLoader(ds, batch_size=bs, num_workers=workers, collate_fn=collate)


def take(ld: StreamingDataLoader, n: int) -> list[int]:
    out: list[int] = []
    for i, b in enumerate(ld):
        out += b
        if i + 1 == n:
            break
    return out


def _world(monkeypatch: pytest.MonkeyPatch, rank: int, ranks: int) -> None:
    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv("WORLD_SIZE", str(ranks))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(ranks))


@pytest.mark.parametrize("workers", [0, 2])
def test_second_checkpoint_after_a_resume(dataset: str, workers: int) -> None:
    full = [x for b in make(dataset) for x in b]
    ld = make(dataset, workers)
    first = take(ld, 7)
    s1 = ld.state_dict()
    assert s1["sample_in_epoch"] == 56
    ld2 = make(dataset, workers)
    ld2.load_state_dict(s1)
    mid = take(ld2, 11)
    s2 = ld2.state_dict()  # the second checkpoint, after a resume
    assert s2["sample_in_epoch"] == 56 + 88
    ld3 = make(dataset, workers)
    ld3.load_state_dict(s2)
    rest = [x for b in ld3 for x in b]
    assert first + mid + rest == full
    # the dataset's own arithmetic, called as the reference's loaders call it
    ds = StreamingDataset(local=dataset, batch_size=8, shuffle=True)
    ds.load_state_dict(s1)
    it = iter(ds)
    [next(it) for _ in range(5)]
    assert ds.state_dict(5, from_beginning=False)["sample_in_epoch"] == 61
    assert ds.state_dict(61, from_beginning=True)["sample_in_epoch"] == 61


def test_second_checkpoint_after_a_resume_on_another_world(
    dataset: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 2 ranks x batch 4 stop after 6 batches each (48 samples); 1 rank x batch 8 resumes,
    # checkpoints again after 5 batches (88), and a third run finishes the epoch
    seen: list[int] = []
    states = []
    for r in range(2):
        _world(monkeypatch, r, 2)
        ld = make(dataset, bs=4)
        seen += take(ld, 6)
        states.append(ld.state_dict())
    assert states[0] == states[1] and states[0]["sample_in_epoch"] == 48
    assert (states[0]["initial_physical_nodes"], states[0]["initial_ranks_per_node"]) == (1, 2)
    _world(monkeypatch, 0, 1)
    ld = make(dataset)
    ld.load_state_dict(states[0])
    seen += take(ld, 5)
    s2 = ld.state_dict()
    assert s2["sample_in_epoch"] == 88
    ld = make(dataset)
    ld.load_state_dict(s2)
    seen += [x for b in ld for x in b]
    assert len(seen) == N and sorted(seen) == list(range(N))  # nothing lost, nothing twice


@pytest.mark.parametrize("algo", ["py1e", "astream"])
def test_resume_adopts_the_checkpoints_seed_and_canonical_nodes(dataset: str, algo: str) -> None:
    kw = {"shuffle_seed": 1234, "num_canonical_nodes": 3, "shuffle_algo": algo}
    full = [x for b in make(dataset, **kw) for x in b]
    ld = make(dataset, **kw)
    first = take(ld, 9)
    state = ld.state_dict()
    assert (state["shuffle_seed"], state["num_canonical_nodes"]) == (1234, 3)
    # a job restarted with the defaults: the checkpoint's order wins
    ld2 = make(dataset, shuffle_algo=algo)
    default = ld2.dataset.state_dict(0)
    assert (default["shuffle_seed"], default["num_canonical_nodes"]) != (1234, 3)
    ld2.load_state_dict(state)
    rest = [x for b in ld2 for x in b]
    assert first + rest == full
    assert ld2.dataset.state_dict(0)["shuffle_seed"] == 1234
    # and the epochs after it keep that order
    nxt = make(dataset, **kw)
    [b for b in nxt]
    assert [x for b in ld2 for x in b] == [x for b in nxt for x in b]
    # every sample; py1e pads as the reference, to 3 canonical nodes of ceil(1000 / 3)
    assert np.array_equal(np.unique(first + rest), np.arange(N))
    assert len(first + rest) == (N if algo == "astream" else 3 * 334)
