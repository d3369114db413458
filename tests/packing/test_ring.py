"""Packed batches through the workers' shared-memory ring (``pack_to`` with ``batch_format``):
the same values and order as stacking the sample path's sequences, resume, pack_last, no leak,
nothing left after a worker is killed; and epochs reaching spawned persistent workers."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from collections import Counter
from typing import Any

import numpy as np
import pytest
import torch
from engine.test_batch_shm import _new_shm, memfd_maps

from astream import StreamingDataLoader, StreamingDataset
from astream.torch import shm

from .conftest import flat
from .test_core import naive
from .test_dataset import OPTS, make, run, same

KEYS = ("input_ids", "position_ids", "segment_ids")


def stacked_sample_path(path: str, seq_len: int, loader_kw: dict[str, Any], **kw: Any) -> Any:
    """Epochs of the packed *sample* path (a loader yielding the lists of sequences, collated by
    nothing), each batch ``torch.stack``-ed here: what the batch path must equal."""
    ld = StreamingDataLoader(make(path, seq_len, **kw), collate_fn=list, **loader_kw)

    def epoch() -> list[dict[str, torch.Tensor]]:
        return [
            {k: torch.stack([torch.from_numpy(np.asarray(s[k])) for s in seqs]) for k in KEYS}
            for seqs in ld
        ]

    return epoch


def through_ring(ld: Any, workers: int, fmt: str = "torch") -> list[dict[str, Any]]:
    """One epoch of ``ld``, copied; checks every batch of a worker came through a ring slot
    (mapped in this process) and, with no worker, that none did; the columns' type; and that
    the batches, all held until the epoch's end, were not overwritten meanwhile."""
    out, held = [], []
    kind = torch.Tensor if fmt == "torch" else np.ndarray
    for b in ld:
        assert set(b) == set(KEYS) and all(type(v) is kind for v in b.values())
        if workers:
            assert shm.mapped_slots() > 0
        out.append({k: torch.as_tensor(v).clone() for k, v in b.items()})
        held.append(b)
    # every batch held to the end is intact: a slot is not reused while the trainer holds it
    assert equal([{k: torch.as_tensor(v) for k, v in b.items()} for b in held], out)
    return out


def equal(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool:
    return len(a) == len(b) and all(
        x[k].dtype == y[k].dtype and torch.equal(x[k], y[k]) for x, y in zip(a, b) for k in KEYS
    )


CASES = [
    pytest.param(0, False, None, id="w0"),
    pytest.param(2, False, "fork", id="w2-fork"),
    pytest.param(2, True, "fork", id="w2-fork-persistent"),
    pytest.param(2, False, "spawn", id="w2-spawn", marks=pytest.mark.slow),
    pytest.param(2, True, "spawn", id="w2-spawn-persistent", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("workers,persistent,context", CASES)
def test_batches_equal_stacked_sample_path(
    tokens: Any, workers: int, persistent: bool, context: str | None
) -> None:
    """batch_format="torch" and "numpy", two epochs: each batch is ``torch.stack`` of the
    sample path's sequences of that step (same values, dtypes and order), built in a ring slot
    with workers."""
    path, docs = tokens
    kw: dict[str, Any] = {"batch_size": 3, "num_workers": workers}
    if workers:
        kw.update(persistent_workers=persistent, multiprocessing_context=context)
    want = stacked_sample_path(path, 40, kw)
    want = [want(), want()]
    assert flat(want[0]) != flat(want[1])  # two epochs, two orders
    every = Counter(t for d in docs for t in d.tolist())
    assert all(Counter(flat(e)) == every for e in want)
    for fmt in ("torch",) if context == "spawn" else ("torch", "numpy"):  # spawn is slow
        ld = StreamingDataLoader(make(path, 40), batch_format=fmt, **kw)
        for e in range(2):
            got = through_ring(ld, workers, fmt)
            assert equal(got, want[e]), (fmt, e)
        del ld
        gc.collect()


@pytest.mark.parametrize("last", ["pad", "drop"])
def test_pack_last_and_drop_last(tokens: Any, last: str) -> None:
    """pack_last="pad" (pad id -1 in the batch, segment 0) or "drop" (no padding at all), with
    drop_last False (each worker's last batch short) or True (short batches dropped)."""
    path, _ = tokens
    kw: dict[str, Any] = {"batch_size": 4, "num_workers": 2}
    # astream's own order: there the workers' last batches come out short (asserted below)
    opts = {"pack_last": last, "pack_pad_id": -1, "shuffle_algo": "astream"}
    want = stacked_sample_path(path, 48, kw, **opts)()
    got = through_ring(StreamingDataLoader(make(path, 48, **opts), batch_format="torch", **kw), 2)
    assert equal(got, want)
    pads = sum(int((b["input_ids"] == -1).sum()) for b in got)
    blanks = sum(int((b["segment_ids"] == 0).sum()) for b in got)
    assert pads == blanks and (pads > 0) == (last == "pad")
    assert sorted(len(b["input_ids"]) for b in got)[0] < 4  # short last batches
    full = through_ring(
        StreamingDataLoader(make(path, 48, **opts), batch_format="torch", drop_last=True, **kw), 2
    )
    assert equal(full, [b for b in want if len(b["input_ids"]) == 4])
    # ds.batches() (in-process) stacks the same way: worker stream 0 of 1
    one = stacked_sample_path(path, 48, {"batch_size": 4}, **opts)()
    got1 = [
        {k: torch.from_numpy(v) for k, v in b.items()} for b in make(path, 48, **opts).batches()
    ]
    assert equal(got1, one)


@pytest.mark.parametrize("fmt,persistent", [("torch", False), ("numpy", True)])
def test_batch_loader_resume_exact(tokens: Any, fmt: str, persistent: bool) -> None:
    """The state after k ring batches resumes with exactly the remaining batches (k in the
    middle of a sequence's document; after a worker's stream ran out), state_dict as the
    sample path's."""
    path, _ = tokens
    kw: dict[str, Any] = {"batch_size": 3, "num_workers": 2, "persistent_workers": persistent}
    full = run(StreamingDataLoader(make(path, 32), batch_format=fmt, **kw))
    samples = StreamingDataLoader(make(path, 32), **kw)
    run(samples, 5)
    for k in (5, len(full) - 1):
        loader = StreamingDataLoader(make(path, 32), batch_format=fmt, **kw)
        head = run(loader, k)
        state = loader.state_dict()
        if k == 5:
            assert state == samples.state_dict()  # the same checkpoint as the sample path's
        if persistent:
            loader.load_state_dict(state)
            rest = run(loader)
        else:
            again = StreamingDataLoader(make(path, 32), batch_format=fmt, **kw)
            again.load_state_dict(state)
            rest = run(again)
        assert same(head + rest, full), k


def test_plain_dataloader_over_batch_view(tokens: Any) -> None:
    """A plain DataLoader over ``batch_view`` gets ring batches too (no cursor key), the same
    values as the StreamingDataLoader's; shared_memory=False goes through torch's pickling."""
    from torch.utils.data import DataLoader

    path, _ = tokens
    want = run(StreamingDataLoader(make(path, 24, bs=5), batch_size=5, num_workers=2,
                                   batch_format="torch"))  # fmt: skip
    view = make(path, 24, bs=5).batch_view("torch")
    got = through_ring(DataLoader(view, batch_size=None, num_workers=2), 2)
    assert same(got, want)
    del view
    gc.collect()
    assert shm.mapped_slots() == 0  # the view's maps went with it (the batches keep theirs)
    view = make(path, 24, bs=5).batch_view("torch", shared_memory=False)
    got = []
    for b in DataLoader(view, batch_size=None, num_workers=2):
        assert shm.mapped_slots() == 0
        got.append(b)
    assert same(got, want)


def test_no_leak_over_20_epochs(tokens: Any) -> None:
    """20 epochs of a packed batch loader (new workers each epoch): no slot map, memfd map,
    /dev/shm entry or descriptor more than the latest workers' rings."""
    path, docs = tokens
    shm_before = set(os.listdir("/dev/shm"))
    total = sum(len(d) for d in docs)
    ld = StreamingDataLoader(make(path, 256, bs=16), batch_size=4, num_workers=2,
                             batch_format="torch")  # fmt: skip
    assert sum(int((b["segment_ids"] > 0).sum()) for b in ld) == total
    gc.collect()
    fds_before = len(os.listdir("/proc/self/fd"))
    for _ in range(19):
        assert sum(int((b["segment_ids"] > 0).sum()) for b in ld) == total
    gc.collect()
    assert 0 < shm.mapped_slots() <= 2 * 4  # the latest workers' rings at most
    del ld
    gc.collect()
    assert shm.mapped_slots() == 0 and memfd_maps() == 0
    assert _new_shm(shm_before) == set()
    assert len(os.listdir("/proc/self/fd")) <= fds_before + 2


KILL_SCRIPT = """
import gc, os, signal, sys
from torch.utils.data import DataLoader
from astream import StreamingDataLoader, StreamingDataset
from tests.engine.dying import kill_worker_0_at_its_fourth_batch
kill_worker_0_at_its_fourth_batch()  # see tests/engine/dying.py
ds = StreamingDataset(local=sys.argv[1], batch_size=4, shuffle=True, pack_to=24)
if sys.argv[2] == "plain":
    ld = DataLoader(ds.batch_view("torch"), batch_size=None, num_workers=2)
else:
    ld = StreamingDataLoader(ds, batch_size=4, num_workers=2, batch_format="torch")
it = iter(ld)
first = next(it)
got = 1
errors = []
try:
    try:
        for batch in it:  # torch's SIGCHLD handler may raise at any line once worker 0 is dead
            got += 1
    except RuntimeError as exc:
        errors.append(repr(exc))  # not the exception: its traceback holds batches
        del it  # its workers' pids unregistered: the handler raises no more
except RuntimeError as exc:  # the handler again, while the first error was being handled
    errors.append(repr(exc))
print("raised", bool(errors) and all("worker" in e for e in errors), errors)
print("batches", got)
it = batch = None  # the last batch that came after the kill, if any: not held past here
del it, batch, ld, ds
gc.collect()
assert first["input_ids"].shape == (4, 24)  # a batch the trainer holds stays readable
del first
gc.collect()
with open("/proc/self/maps") as f:
    print("maps", sum("memfd:astream-batch" in line for line in f))
"""


@pytest.mark.slow  # ~15 s; torch's SIGCHLD handler makes the failure path timing-dependent
@pytest.mark.parametrize("kind", ["plain", "streaming"])
def test_worker_killed_leaves_nothing(tokens: Any, kind: str) -> None:
    path, _ = tokens
    shm_before = set(os.listdir("/dev/shm"))
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    out = subprocess.run([sys.executable, "-c", KILL_SCRIPT, path, kind], capture_output=True,
                         text=True, env=env, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert "raised True" in out.stdout and "maps 0" in out.stdout, out.stdout
    assert _new_shm(shm_before) == set()


# -- epochs reaching spawned persistent workers -------------------------------------------------
def in_process_packed(path: str, seq_len: int, bs: int, loader_bs: int, workers: int) -> Any:
    """The packed loader's epochs computed in this process from the sample path, with no
    worker: the epoch's sample order (``num_workers=0``) in planned batches of ``bs``, worker
    ``w``'s stream = batches ``w::workers``, each stream concatenated and split
    (``test_core.naive``) and cut into loader batches of ``loader_bs`` sequences, the workers'
    batches taken round-robin (an exhausted worker skipped), as torch does."""
    ds = StreamingDataset(local=path, batch_size=bs, **OPTS)

    def epoch(number: int | None = None) -> list[dict[str, np.ndarray]]:
        if number is not None:
            ds.set_epoch(number)
        order = [s["input_ids"] for s in ds]
        planned = [order[i : i + bs] for i in range(0, len(order), bs)]
        per_worker = []
        for w in range(workers):
            docs = [d for b in planned[w::workers] for d in b]
            seqs = naive(docs, seq_len, "pad", 0)
            per_worker.append([
                {"input_ids": np.stack([s["tok"] for s in seqs[i : i + loader_bs]]),
                 "position_ids": np.stack([s["pos"] for s in seqs[i : i + loader_bs]]),
                 "segment_ids": np.stack([s["seg"] for s in seqs[i : i + loader_bs]])}
                for i in range(0, len(seqs), loader_bs)
            ])  # fmt: skip
        out = []
        for i in range(max(map(len, per_worker))):
            out += [b[i] for b in per_worker if i < len(b)]
        return out

    return epoch


def doc_ids(samples: list[dict[str, Any]]) -> list[int]:
    """``collate_fn`` (module level: spawned workers import it): the samples' document ids."""
    return [int(s["doc"]) for s in samples]


def labels(loader: Any) -> list[int]:
    return [x for b in loader for x in b]


@pytest.mark.slow  # ~35 s: spawned workers and a packed epoch per step
def test_spawn_persistent_epochs_match_in_process(tokens: Any) -> None:
    """multiprocessing_context="spawn" with persistent_workers=True: two epochs, then a third
    after set_epoch(5), of a plain packed loader give the orders of in-process iteration
    (the unpacked loader: the next test). The epoch reaches the spawned workers only through
    the dataset's shared state (astream/shared.py SharedInts); without it the two consecutive
    epochs still match (a worker moves on to the next epoch by itself), the set_epoch does
    not."""
    path, _ = tokens
    kw: dict[str, Any] = {"num_workers": 2, "persistent_workers": True,
                          "multiprocessing_context": "spawn"}  # fmt: skip
    ref = in_process_packed(path, 40, 4, 3, 2)
    want = [ref(), ref(), ref(5)]
    assert flat(want[0]) != flat(want[1]) and flat(want[1]) != flat(want[2])
    packed = StreamingDataLoader(make(path, 40), batch_size=3, **kw)
    assert same(run(packed), want[0]) and same(run(packed), want[1])
    packed.set_epoch(5)
    assert same(run(packed), want[2])


def test_spawn_persistent_set_epoch_unpacked(tokens: Any) -> None:
    """The unpacked half of the test above, in the default run (~15 s): spawned persistent
    workers follow set_epoch(5) only through the dataset's shared epoch (SharedInts)."""
    path, _ = tokens
    kw: dict[str, Any] = {"num_workers": 2, "persistent_workers": True,
                          "multiprocessing_context": "spawn"}  # fmt: skip
    plain = StreamingDataset(local=path, batch_size=4, **OPTS)
    ref_plain = StreamingDataLoader(plain, batch_size=4, collate_fn=doc_ids)
    want_plain = [labels(ref_plain), labels(ref_plain)]
    plain.set_epoch(5)
    want_plain.append(labels(ref_plain))
    assert want_plain[0] != want_plain[1] != want_plain[2]
    loader = StreamingDataLoader(StreamingDataset(local=path, batch_size=4, **OPTS),
                                 batch_size=4, collate_fn=doc_ids, **kw)  # fmt: skip
    assert labels(loader) == want_plain[0] and labels(loader) == want_plain[1]
    loader.set_epoch(5)
    assert labels(loader) == want_plain[2]


def test_handover_torch_keeps_packed_batches_out_of_the_ring(tokens: Any) -> None:
    """StreamingDataLoader(pack_to dataset, batch_format=..., handover="torch"): the stacked
    batches cross by torch's pickling (no ring slot is mapped here), with the ring's values."""
    path, _ = tokens
    gc.collect()
    want = run(StreamingDataLoader(make(path, 24, bs=5), batch_size=5, num_workers=2,
                                   batch_format="torch"))  # fmt: skip
    gc.collect()
    assert shm.mapped_slots() == 0
    got = []
    for b in StreamingDataLoader(make(path, 24, bs=5), batch_size=5, num_workers=2,
                                 batch_format="torch", handover="torch"):  # fmt: skip
        assert shm.mapped_slots() == 0
        got.append(b)
    assert same(got, want)
