"""The epoch scenario refuses an epoch that yielded a sample the dataset does not have: such a
run delivered corrupted bytes (a shard downloaded wrong), so it is a failure, never a figure."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from benchmarks.runners.common import Adapter, WrongSamples, scenario_epoch


class _Fixed(Adapter):
    """Yields the given id batches (the shared collate's layout: ids and byte offsets)."""

    def __init__(self, batches: list[list[int]]) -> None:
        self.batches = batches

    def dataset(self, spec: dict[str, Any], cold: bool) -> Any:
        return None

    def loader(self, spec: dict[str, Any], ds: Any, num_workers: int) -> Any:
        return [
            {"id": torch.tensor(b), "offsets": torch.arange(len(b) + 1) * 10} for b in self.batches
        ]


SPEC = {"cold": False, "num_workers": 0, "samples": 4}


def test_an_epoch_of_the_datasets_ids_is_measured() -> None:
    out = scenario_epoch(_Fixed([[2, 0], [3, 1]]), dict(SPEC))
    assert (out["samples"], out["unique"], out["bytes"]) == (4, 4, 40)


@pytest.mark.parametrize("bad", [4, -1, 93632837411488])
def test_an_id_outside_the_dataset_fails_the_run(bad: int) -> None:
    with pytest.raises(WrongSamples, match=rf"1 of 4 yielded ids outside 0..3 \(first \[{bad}\]\)"):
        scenario_epoch(_Fixed([[2, 0], [bad, 1]]), dict(SPEC))
