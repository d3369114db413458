"""torchdata's ``StatefulDataLoader`` over an astream ``StreamingDataset`` (the stateful-iterable
protocol: ``dataset.state_dict()`` without arguments, per DataLoader worker): a loader state taken
mid-epoch 0, at the end of epoch 0 and mid-epoch 1 resumes a fresh dataset and loader to exactly
the batches (sample ids, in order) an uninterrupted run yields after it, with 0 and 2 workers.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torchdata.stateful_dataloader as tdn  # the [trainers] extra: scripts/setup.sh installs it

from astream import StreamingDataset

from .conftest import NUM_SAMPLES

STEPS = 125  # 2,000 samples in batches of 16


def _loader(data: str, workers: int, batch_size: int | None) -> Any:
    ds = StreamingDataset(local=data, batch_size=batch_size, shuffle=True)
    return tdn.StatefulDataLoader(ds, batch_size=16, num_workers=workers)


def _ids(batch: dict[str, Any]) -> list[int]:
    return [int(i) for i in batch["idx"]]


POINTS = ["in-loop 40", "in-loop 125", "after-loop 125", "in-loop 155"]
_REFS: dict[tuple[str, int], Any] = {}


def _reference(data: str, workers: int) -> tuple[list[list[int]], dict[str, Any]]:
    """An uninterrupted 2-epoch run and the loader states taken along it (once per session):
    in the loop after 40 batches (mid-epoch 0), after the last batch of epoch 0, after the loop
    over epoch 0 ended (StopIteration seen), and mid-epoch 1."""
    key = (data, workers)
    if key not in _REFS:
        loader = _loader(data, workers, 16)
        ref: list[list[int]] = []
        states: dict[str, Any] = {}
        for epoch in range(2):
            for batch in loader:
                ref.append(_ids(batch))
                if f"in-loop {len(ref)}" in POINTS:
                    states[f"in-loop {len(ref)}"] = copy.deepcopy(loader.state_dict())
            if epoch == 0:
                states[f"after-loop {len(ref)}"] = copy.deepcopy(loader.state_dict())
        _REFS[key] = ref, states
    return _REFS[key]  # type: ignore[no-any-return]


@pytest.mark.parametrize("workers", [0, 2])
def test_reference_run_is_every_sample_once_per_epoch(trainer_data: str, workers: int) -> None:
    ref, _ = _reference(trainer_data, workers)
    assert len(ref) == 2 * STEPS
    for e in range(2):
        epoch_ids = sorted(i for b in ref[e * STEPS : (e + 1) * STEPS] for i in b)
        assert epoch_ids == list(range(NUM_SAMPLES))
    assert ref[:STEPS] != ref[STEPS:]


CASES = [pytest.param(w, p) for w in (0, 2) for p in POINTS]


@pytest.mark.parametrize(("workers", "point"), CASES)
def test_stateful_dataloader_exact_resume(trainer_data: str, workers: int, point: str) -> None:
    ref, states = _reference(trainer_data, workers)
    where, done = point.split()[0], int(point.split()[1])
    resumed = _loader(trainer_data, workers, 16)
    resumed.load_state_dict(states[point])
    # Each iteration after the load is one iteration of the interrupted run: the first finishes
    # the epoch the state was taken in -- empty when taken after its last batch, as torchdata
    # does for any dataset -- unless the state was taken after that loop had ended.
    first = [_ids(b) for b in resumed]
    if where == "after-loop":
        assert first == ref[STEPS:]
        return
    epoch_end = STEPS if done <= STEPS else 2 * STEPS
    assert first == ref[done:epoch_end], len(first)
    if done <= STEPS:
        assert [_ids(b) for b in resumed] == ref[STEPS:]


def test_dataset_without_batch_size_takes_the_loaders(trainer_data: str) -> None:
    # no batch_size on the dataset: the StatefulDataLoader's 16 is taken, 2 workers, every sample
    loader = _loader(trainer_data, 2, None)
    ids = [i for b in loader for i in _ids(b)]
    assert sorted(ids) == list(range(NUM_SAMPLES))
