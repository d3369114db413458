"""The main process reads every DataLoader worker's first batch by ranges while the workers start.

Theory of operation
-------------------
A cold iteration with workers begins with each worker reading its first batch by ranged GETs
(``Engine._range_batch``). Left to the workers, that work starts only once a worker has forked,
started its own loop thread and its own SDK client, and the workers' requests reach the server
all at once and in no order, so worker 0's batch -- the one the DataLoader hands out first --
completes about when every worker's does. The process that builds the loader already has its
loop thread and its client (the index was read with them), so it reads the first batch of each
worker instead: one queue of GETs in worker order (worker 0's first), each shard's header read
once for all workers, and each worker's bytes sent to it as soon as they are complete. The reads
start before torch starts the workers, which waits for the first answer (at most
``_LEAD_HEAD_START_S``, 0.1 s, in torch/dataloader.py): a fork parks the loop thread (below), and
forking two workers of a process that has imported torch takes 17-50 ms on the 2-core benchmark
machine, during which the server is answering the GETs already at it. The workers only wait for
their messages, so the fork is off the first batch's path (the cold images benchmark's first
batch came 34-38 ms sooner, medians of interleaved pairs).

Forking while the loop thread reads: every fork parks the loop thread between two callbacks, so
no lock it takes (a module's, OpenSSL's, a buffered stream's) is inherited held
(``astream/bridge.py``); a forked worker builds its own loop and client (``bridge``, the
engine's per-process parts by pid) and never touches the ones it inherited; the write ends it
inherits are closed at once (below). If torch fails to start the workers, the reads stop (no GET
starts) and each message, written or not, finds no reader and is dropped.

Hand-over: one pipe per worker, made before the workers start (a forked worker inherits its
end; a spawned one receives it with the dataset, which multiprocessing allows while it spawns).
The message is ``(wants, shards, versions)``: the (shard, samples) the main process read for
that worker and, per shard, the compact buffer, its offsets and the slot of each sample (what
:class:`~astream.runtime.shard_handles.RangeShard` holds), or None when the read failed; and the
version of each shard object those bytes came from, which the worker's own reads of those
objects must then match (``runtime/versions.py``). A worker uses the bytes of each shard it
would read by ranges itself when the main process read exactly those samples of it; otherwise,
and when no message comes (the main process gone), it reads its ranges itself as before. Its
wants lack a shard of the message only when that shard was completed in the node's cache after
the main process planned (another worker's download, from its second batch on, while this one
started late): it reads that shard from the cache. Nothing is written to the cache or to shared
memory, so a kill -9 of any process leaves nothing behind: a pipe is closed by the
kernel with the last process holding it.

Pipes and processes: the main process closes its copies of the read ends once the workers are
started, and a forked worker closes the inherited write ends (``os.register_at_fork``), so a
writer whose worker is gone gets an error instead of blocking, and a reader whose main process
is gone sees the end of the pipe. Each message is written by a daemon thread: a worker reads its
message only when it reaches its first batch, and a message larger than the pipe's buffer waits
for that.
"""

from __future__ import annotations

import fcntl
import os
import pickle
import threading
import time
from multiprocessing.connection import Connection, Pipe
from typing import Any

__all__ = ["LeadEnds", "open_pipes", "send"]

Wants = list[tuple[int, list[int]]]
# shard -> (compact buffer, its offsets from 0, shard sample -> place in the buffer); for a
# Parquet row group read by pages: ({object range: its bytes}, None, row -> place)
Payload = dict[int, tuple[Any, list[int] | None, dict[int, int]]]
# (stream's remote, object key) -> the version the main process read (runtime/versions.py)
Versions = dict[tuple[str, str], str]

_WRITERS: list[Connection] = []  # this process's write ends (closed in a forked child)
_WAIT_S = 300.0  # at most this long for a message (the main process reads with retries)
_PIPE_BYTES = 1 << 20  # the pipe buffer asked for (see _widen)


class LeadEnds:
    """The read ends of one iteration's pipes, one per worker: what travels to the workers
    with the dataset (picklable while the workers are spawned)."""

    def __init__(self, readers: list[Connection]) -> None:
        self.readers: list[Connection | None] = list(readers)
        self.ppid = os.getpid()  # the process that reads the batches (workers' parent)

    def take(self, worker: int) -> Connection | None:
        """Worker ``worker``'s read end; the others' copies are closed here."""
        mine = None
        for w, r in enumerate(self.readers):
            if r is None:
                continue
            if w == worker:
                mine = r
            else:
                r.close()
        self.readers = []
        return mine

    def close(self) -> None:
        for r in self.readers:
            if r is not None:
                r.close()
        self.readers = []


def open_pipes(n: int) -> tuple[LeadEnds, list[Connection]]:
    """``n`` one-way pipes: the read ends (for the workers) and the write ends (kept here),
    each with a buffer of up to ``_PIPE_BYTES`` (see :func:`_widen`)."""
    readers, writers = [], []
    for _ in range(n):
        r, w = Pipe(duplex=False)
        _widen(w)
        readers.append(r)
        writers.append(w)
    _WRITERS.extend(writers)
    return LeadEnds(readers), writers


def _widen(conn: Connection) -> None:
    """Grow the pipe's buffer from the default 64 KiB to ``_PIPE_BYTES`` where the system
    allows it (Linux: up to ``/proc/sys/fs/pipe-max-size``, 1 MiB by default): an images
    worker's message is ~3 MB, and each 64 KiB the writer thread passes wakes both processes
    and has the writer wait for the main process's GIL while its loop thread is busy reading
    the next worker's batch (22-41 ms for that message on 2 cores, against a few ms)."""
    set_size = getattr(fcntl, "F_SETPIPE_SZ", None)
    if set_size is None:
        return
    try:
        fcntl.fcntl(conn.fileno(), set_size, _PIPE_BYTES)
    except OSError:
        pass  # above this system's limit: the default buffer works, in more steps


def send(conn: Connection, wants: Wants, payload: Payload | None, versions: Versions) -> None:
    """Write one worker's message from a daemon thread (see the module's docstring)."""
    data = pickle.dumps((wants, payload, versions), protocol=pickle.HIGHEST_PROTOCOL)

    def write() -> None:
        try:
            conn.send_bytes(data)
        except OSError:
            pass  # the worker is gone (or never reached its first batch and exited)
        finally:
            _forget(conn)

    threading.Thread(target=write, name="astream-lead", daemon=True).start()


def _forget(conn: Connection) -> None:
    conn.close()  # before it leaves _WRITERS: a worker forked in between closes it too
    try:
        _WRITERS.remove(conn)
    except ValueError:
        pass


def close_writers(writers: list[Connection]) -> None:
    for w in writers:
        _forget(w)


def receive(conn: Connection, ppid: int) -> tuple[Wants, Payload | None, Versions] | None:
    """This worker's message, or None when none comes (the pipe ended, this worker was
    orphaned, or ``_WAIT_S`` passed). The read end is closed either way. ``ppid`` is the
    loader's process; a worker started by a forkserver has another parent, whose change
    (the worker orphaned) is what is watched then."""
    try:
        deadline = time.monotonic() + _WAIT_S
        parent = os.getppid()
        if parent != ppid and parent == 1:
            return None  # orphaned already: the loader's process is gone
        while not conn.poll(0.5):
            if os.getppid() != parent or time.monotonic() > deadline:
                return None
        got: tuple[Wants, Payload | None, Versions] = pickle.loads(conn.recv_bytes())
        return got
    except (EOFError, OSError, pickle.UnpicklingError):
        return None
    finally:
        conn.close()


def _after_fork_in_child() -> None:
    # a forked worker must not hold the write ends: its own read end would never see EOF
    for w in _WRITERS:
        try:
            w.close()
        except OSError:
            pass
    _WRITERS.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)
