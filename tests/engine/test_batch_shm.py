"""The workers' shared-memory ring: held batches are never overwritten, nothing leaks over
epochs, and a worker killed with SIGKILL leaves no segment behind."""

from __future__ import annotations

import gc
import os
import time
from typing import Any

import pytest

from astream import StreamingDataLoader, StreamingDataset
from astream.torch import shm

from .conftest import write_dataset


def memfd_maps() -> int:
    with open("/proc/self/maps") as f:
        return sum(1 for line in f if "memfd:astream-batch" in line)


@pytest.fixture(scope="module")
def path(tmp_path_factory: pytest.TempPathFactory) -> str:
    p = str(tmp_path_factory.mktemp("shm") / "ds")
    write_dataset(p, 400)
    return p


def loader(path: str, **kw: Any) -> StreamingDataLoader:
    ds = StreamingDataset(local=path, batch_size=8, shuffle=True)
    return StreamingDataLoader(ds, batch_size=8, num_workers=2, batch_format="torch", **kw)


def test_held_batches_are_never_overwritten(path: str) -> None:
    held = []
    for b in loader(path):
        held.append((b, {k: v.clone() for k, v in b.items() if hasattr(v, "clone")}))
    assert len(held) == 50
    for b, copy in held:
        for k, v in copy.items():
            assert (b[k] == v).all(), k


def _foreign_shm(names: set[str]) -> set[str]:
    """Those of ``names`` (``/dev/shm`` entries) that belong to another process: one a live
    process other than this one maps (a semaphore or segment in use elsewhere; matched by
    inode, as a semaphore is mapped under its temporary name), or a torch_PID_* segment of
    another pid. The machine is shared: other test runs create and drop ``sem.mp-*`` files
    while this test runs, and those are not this test's leaks."""
    me = os.getpid()
    out = {n for n in names if n.startswith("torch_") and n.split("_")[1] != str(me)}
    inodes: dict[str, str] = {}
    for n in names - out:
        try:
            inodes[str(os.stat("/dev/shm/" + n).st_ino)] = n
        except FileNotFoundError:
            out.add(n)  # gone meanwhile: not a leak
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == me or not inodes:
            continue
        try:
            with open(f"/proc/{pid}/maps") as f:
                for line in f:
                    fields = line.split(None, 5)
                    if len(fields) == 6 and fields[5].startswith("/dev/shm/"):
                        n = inodes.pop(fields[4], None)
                        if n is not None:
                            out.add(n)
        except OSError:
            continue  # gone, or not ours to read
    return out


def _new_shm(before: set[str]) -> set[str]:
    new = set(os.listdir("/dev/shm")) - before
    if new:
        time.sleep(1.0)  # another process's entry made just now is usually gone again
        new &= set(os.listdir("/dev/shm"))
    return new - _foreign_shm(new)


def test_no_leak_over_20_epochs(path: str) -> None:
    shm_before = set(os.listdir("/dev/shm"))
    ld = loader(path)
    assert sum(len(b["label"]) for b in ld) == 400
    gc.collect()
    # after a warm-up epoch: what the first DataLoader run opens once (torch's own descriptors,
    # imports) is not a leak; what every epoch would add on top of it is
    fds_before = len(os.listdir("/proc/self/fd"))
    for _ in range(19):
        n = sum(len(b["label"]) for b in ld)
        assert n == 400
    del ld
    gc.collect()
    assert shm.mapped_slots() <= 2 * 4  # the latest workers' rings at most
    assert memfd_maps() <= 2 * 4
    assert _new_shm(shm_before) == set()
    assert len(os.listdir("/proc/self/fd")) <= fds_before + 2


KILL_SCRIPT = """
import gc, os, signal, sys
from torch.utils.data import DataLoader
from astream import StreamingDataset
from tests.engine.dying import kill_worker_0_at_its_fourth_batch
kill_worker_0_at_its_fourth_batch()  # see tests/engine/dying.py
ds = StreamingDataset(local=sys.argv[1], batch_size=8, shuffle=True)
ld = DataLoader(ds.batch_view("torch"), batch_size=None, num_workers=2)
it = iter(ld)
first = next(it)
got = 1
errors = []
try:
    try:
        for batch in it:  # torch's SIGCHLD handler may raise at any line once worker 0 is dead
            got += 1
            del batch  # a batch still named here would keep its slot mapped, rightly
    except RuntimeError as exc:
        errors.append(repr(exc)[:200])  # not the exception: its traceback holds batches
        del it  # its workers' pids unregistered: the handler raises no more
except RuntimeError as exc:  # the handler again, while the first error was being handled
    errors.append(repr(exc)[:200])
print("raised", bool(errors) and all("worker" in e for e in errors), errors)
print("batches", got)
it = None
del it, ld, ds
gc.collect()
assert first["label"].shape == (8,)  # a batch the trainer holds stays readable
del first
gc.collect()
with open("/proc/self/maps") as f:
    print("maps", sum("memfd:astream-batch" in line for line in f))
"""


@pytest.mark.slow  # ~15 s; torch's SIGCHLD handler makes the failure path timing-dependent
def test_worker_killed_leaves_nothing(path: str) -> None:
    import subprocess
    import sys

    shm_before = set(os.listdir("/dev/shm"))
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    out = subprocess.run(
        [sys.executable, "-c", KILL_SCRIPT, path],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "raised True" in out.stdout and "maps 0" in out.stdout, out.stdout
    got = int(out.stdout.split("batches ")[1].split()[0])
    assert got < 50, out.stdout  # worker 0 died mid-epoch
    assert _new_shm(shm_before) == set()


def test_a_collection_that_starts_inside_the_slot_lock_forgets_without_deadlock() -> None:
    import threading

    owner = shm.RingCollate(lambda x: x)
    owner.me = owner  # type: ignore[attr-defined]  # a cycle: only a collection frees it
    group = owner.group
    shm._PIDS[(group, 0)] = 1  # as if a worker of this loader had handed over a slot
    del owner
    done = threading.Event()

    def run() -> None:
        with shm._LOCK:  # as _slot_map holds it when an allocation starts a collection
            gc.collect()  # runs the loader's finalizer (forget_group), which takes the lock
        done.set()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(10)
    assert done.is_set(), "forget_group deadlocked on the slot lock"
    assert (group, 0) not in shm._PIDS
