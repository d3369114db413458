"""Premade ring slots: with forked DataLoader workers, the loader makes the memfds of each
worker's first ring slots before it forks them (``RingOwner.premake``), so a worker's first
batches cross as handles only -- no ``DupFd`` connection to the worker's resource-sharer
thread, which the main process otherwise makes (``detach``) for every new slot. Counted here
by wrapping ``detach`` in the main process; the batches must equal torch's own pickling, and
no descriptor may be left once the loader is gone."""

from __future__ import annotations

import gc
import os
import pickle
from multiprocessing import resource_sharer
from typing import Any

import pytest

from astream import StreamingDataLoader, StreamingDataset
from astream.torch import shm
from engine.test_ring_collate import _copy, path, same

__all__ = ["path"]  # the module fixture of test_ring_collate, shared


def batch_fds() -> int:
    """This process's descriptors of ring slots (memfds named ``astream-batch-*``)."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:astream-batch")
        except OSError:
            pass
    return n


@pytest.fixture
def detaches(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many slot descriptors the main process fetched from a worker (``DupFd.detach``)."""
    calls = [0]
    real = resource_sharer.DupFd.detach

    def counted(self: Any) -> Any:
        calls[0] += 1
        return real(self)

    monkeypatch.setattr(resource_sharer.DupFd, "detach", counted)
    return calls


def loader(path: str, **kw: Any) -> StreamingDataLoader:
    """torch's default collate: every tensor of a batch goes to the ring (a collate returning
    tensors the ring leaves to torch, as ``mixed_collate`` does, would add torch's own
    descriptor fetches to the count)."""
    ds = StreamingDataset(local=path, batch_size=8, shuffle=True, shuffle_seed=3)
    return StreamingDataLoader(ds, batch_size=8, num_workers=2, **kw)


def test_first_slots_cross_without_a_descriptor_fetch(path: str, detaches: list[int]) -> None:
    want = [_copy(b) for b in loader(path, handover="torch")]
    base = batch_fds()
    detaches[0] = 0
    ld = loader(path)
    assert isinstance(ld.collate_fn, shm.RingCollate)
    group = ld.collate_fn.group  # this loader's slots only: earlier tests' loaders may be alive
    # every batch held: each worker's first 4 batches fill its 4 premade slots, its other 11
    # go to one-off slots, whose descriptors are fetched from the worker as before
    held = list(ld)
    assert len(held) == 30
    same(held, want)
    assert detaches[0] == 2 * (15 - 4)
    # batches dropped as read: slots are reused, all of them premade
    detaches[0] = 0
    for _ in range(3):  # new workers each iteration: their own premade slots
        ld.set_epoch(0)
        got = []
        for b in ld:
            got.append(_copy(b))
            del b
        same(got, want)
        assert shm.premade_fds(group) <= 2 * 4  # only the latest workers' unused ones
    assert detaches[0] == 0
    del held, ld
    gc.collect()
    assert shm.premade_fds(group) == 0 and shm.mapped_slots(group) == 0
    assert batch_fds() == base  # nothing left open here


def test_premade_descriptors_never_pickled(path: str) -> None:
    """A spawned or forkserver worker receives the collate pickled: without the premade
    descriptors (their numbers mean nothing in another process), so it makes its own slots."""
    ld = loader(path)
    ring = ld.collate_fn
    made = ring.premake(2)
    try:
        assert sorted(made) == [0, 1] and all(len(v) == ring.ring for v in made.values())
        copy = pickle.loads(pickle.dumps(ring))
        assert copy._premade is None and copy.group == ring.group
    finally:
        ring._premade = None
        for fds in made.values():
            for fd in fds:
                os.close(fd)
