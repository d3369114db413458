"""The real torch DataLoader's round-robin over workers reproduces each rank's planned sequence."""

from __future__ import annotations

import numpy as np
import pytest

from astream.core.order import EpochPlan
from astream.core.world import World

from .helpers import plan, planned_rank_sequence

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader, IterableDataset, get_worker_info  # noqa: E402


class PlanDataset(IterableDataset):  # type: ignore[misc]
    def __init__(self, plan: EpochPlan, world: World, rank: int, start: int) -> None:
        self.plan, self.world, self.rank, self.start = plan, world, rank, start

    def __iter__(self):
        info = get_worker_info()
        worker = 0 if info is None else info.id
        for batch in self.plan.worker_batches(self.world, self.rank, worker, self.start):
            yield torch.from_numpy(np.ascontiguousarray(batch))


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("start", [0, 24])
def test_dataloader_reproduces_planned_rank_sequence(num_workers, start):
    p = plan([17, 30, 9, 25], num_canonical_nodes=2, batch_size=4, shuffle_block_size=10)
    world = World(2, 1, max(num_workers, 1))
    for rank in range(world.num_ranks):
        loader = DataLoader(
            PlanDataset(p, world, rank, start), batch_size=None, num_workers=num_workers
        )
        got = [i for b in loader for i in b.tolist()]
        assert got == planned_rank_sequence(p, world, rank, start)
        assert len(got) == p.rank_num_samples(world, rank, start)


class PlanSamples(PlanDataset):
    """Yields single ids, so the DataLoader itself batches (as with a real dataset)."""

    def __iter__(self):
        for batch in super().__iter__():
            yield from batch.tolist()


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("num_workers", [0, 2])
def test_dataloader_batches_the_epoch_exactly_and_honours_drop_last(num_workers, drop_last):
    p = plan([17, 30, 9, 25], num_canonical_nodes=2, batch_size=4, shuffle_block_size=10)
    world = World(1, 1, max(num_workers, 1))  # one rank: 81 samples, no padding
    loader = DataLoader(
        PlanSamples(p, world, 0, 0), batch_size=4, num_workers=num_workers, drop_last=drop_last
    )
    got = [b.tolist() for b in loader]
    want = p.global_ids(0, 81).tolist()
    if drop_last:  # the one partial batch (its worker's last) is dropped
        assert [len(b) for b in got] == [4] * 20
        assert [i for b in got for i in b] == want[:80]
    else:
        assert [len(b) for b in got] == [4] * 20 + [1]
        assert [i for b in got for i in b] == want
