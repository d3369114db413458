"""Resumption oracle: stop anywhere, checkpoint, resume on any World or num_workers: exactly
the rest."""

from __future__ import annotations

from typing import Any

import pytest

from astream import StreamingDataLoader, StreamingDataset


def collate(batch: list[dict[str, Any]]) -> list[int]:
    return [int(s["label"]) for s in batch]


def loader(path: str, workers: int, bs: int = 8, **kw: Any) -> StreamingDataLoader:
    ds = StreamingDataset(local=path, batch_size=bs, shuffle=True, **kw)
    return StreamingDataLoader(ds, batch_size=bs, num_workers=workers, collate_fn=collate)


@pytest.mark.parametrize(
    ("before", "after", "stop"), [(0, 0, 17), (2, 0, 40), (0, 2, 61), (2, 2, 1)]
)
def test_resume_exact_suffix(local_dataset: Any, before: int, after: int, stop: int) -> None:
    path = local_dataset[0]
    full = [x for b in loader(path, 0) for x in b]
    first: list[int] = []
    ld = loader(path, before)
    for i, b in enumerate(ld):
        first += b
        if i + 1 == stop:
            break
    state = ld.state_dict()
    assert state["sample_in_epoch"] == stop * 8
    ld2 = loader(path, after)
    ld2.load_state_dict(state)
    rest = [x for b in ld2 for x in b]
    assert first + rest == full


def test_resume_at_epoch_end_starts_next_epoch(local_dataset: Any) -> None:
    path = local_dataset[0]
    ld = loader(path, 0)
    e0 = [x for b in ld for x in b]
    state = ld.state_dict()
    assert state["epoch"] == 0 and state["sample_in_epoch"] == 1000
    ld2 = loader(path, 0)
    ld2.load_state_dict(state)
    e1 = [x for b in ld2 for x in b]
    ref = loader(path, 0)
    [x for b in ref for x in b]
    assert e1 == [x for b in ref for x in b] and e1 != e0


def _rank_batches(
    path: str, monkeypatch: pytest.MonkeyPatch, ranks: int, state: Any
) -> list[list[int]]:
    per_rank = []
    for r in range(ranks):
        monkeypatch.setenv("RANK", str(r))
        monkeypatch.setenv("WORLD_SIZE", str(ranks))
        monkeypatch.setenv("LOCAL_WORLD_SIZE", str(ranks))
        ld = loader(path, 0, bs=4)
        if state is not None:
            ld.load_state_dict(state)
        per_rank.append([b for b in ld])
    return [[x for r in range(ranks) for x in per_rank[r][j]] for j in range(len(per_rank[0]))]


def test_resume_on_another_world_same_global_batches(
    local_dataset: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 4-rank job stops after 10 global batches of 16; a 2-rank job (batch 8) resumes it."""
    path = local_dataset[0]
    four = _rank_batches(path, monkeypatch, 4, None)  # global batches of 4 ranks x 4
    state = {"epoch": 0, "sample_in_epoch": 10 * 16, "num_canonical_nodes": 1, "shuffle_seed": 9176}
    rest: list[list[int]] = []
    for r in range(2):
        monkeypatch.setenv("RANK", str(r))
        monkeypatch.setenv("WORLD_SIZE", "2")
        monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
        ld = loader(path, 0, bs=8)
        ld.load_state_dict(state)
        rest.append([b for b in ld])
    two = [rest[0][j] + rest[1][j] for j in range(len(rest[0]))]
    assert [sorted(b) for b in two] == [sorted(b) for b in four[10:]]
    seen = [x for b in four[:10] for x in b] + [x for b in two for x in b]
    assert sorted(set(seen)) == list(range(1000))


def test_batch_length_of_common_collate_outputs() -> None:
    import torch

    from astream.torch.dataloader import _batch_len

    assert _batch_len(torch.zeros(5, 3)) == 5
    assert _batch_len({"ids": torch.zeros(7), "label": [1] * 7}) == 7
    assert _batch_len([torch.zeros(4, 2), torch.zeros(4)]) == 4
    assert _batch_len([{"a": [1, 2, 3]}, {"a": [4, 5, 6]}]) == 2  # uncollated samples
    assert _batch_len([1, 2, 3, 4, 5, 6]) == 6


def test_state_dict_counts_uncollated_batches(local_dataset: Any) -> None:
    ds = StreamingDataset(local=local_dataset[0], batch_size=8, shuffle=True)
    ld = StreamingDataLoader(ds, batch_size=8, collate_fn=lambda b: b)
    for i, _ in enumerate(ld):
        if i == 4:
            break
    assert ld.state_dict()["sample_in_epoch"] == 40
