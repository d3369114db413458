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

Downloads after the hand-over: the main process reads the workers' batches one worker after
the other, and a worker whose whole first batch it handed over starts its downloads at its next
batch. At that point the main process may still be reading the next worker's batch, and a full
set of whole-shard GETs at the server slows that read, and with it the loader's next batch. So
each pipe stays open until the next worker's message is written too, and a worker's downloads
wait for its end (:class:`PipeEnd`, at most ``END_WAIT_S``).

Whole shards of the other workers' first batches: shards that must be whole before a sample of
them is read (Parquet row groups, compressed shards) are announced by worker ``w`` first for
workers ``0..w-1``'s first batches, then for its own (:meth:`FirstBatch.share_first`), so the
node's download slots go to the batch handed out first. A prefetch never queues behind another
process's download of a shard (``fetch.py``), so the workers split those shards between them.
Only with no ``cache_limit`` and no explicit ``predownload`` (the downloads are then bounded by
nothing but the plan anyway: every shard is fetched once per node), and not when a worker
resumes from its own saved state (a loader that resumes at a sample starts its workers'
iterations there, and they share from there).
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import pickle
import threading
import time
from multiprocessing.connection import Connection, Pipe
from typing import Any

import numpy as np

from astream.runtime.batch_groups import batch_groups
from astream.runtime.fetch import RemoteShard, is_complete
from astream.runtime.placement import dataloader_worker
from astream.runtime.prefetch import Prefetcher
from astream.runtime.ranges import _RANGE_GETS, RangeReads
from astream.runtime.shard_handles import RangeShard

__all__ = ["END_WAIT_S", "FirstBatch", "LeadEnds", "PipeEnd", "open_pipes", "send"]

Wants = list[tuple[int, list[int]]]
# shard -> (compact buffer, its offsets from 0, shard sample -> place in the buffer); for a
# Parquet row group read by pages: ({object range: its bytes}, None, row -> place)
Payload = dict[int, tuple[Any, list[int] | None, dict[int, int]]]
# (stream's remote, object key) -> the version the main process read (runtime/versions.py)
Versions = dict[tuple[str, str], str]

_WRITERS: list[Connection] = []  # this process's write ends (closed in a forked child)
_WAIT_S = 300.0  # at most this long for a message (the main process reads with retries)
# at most this long for the next worker's first batch before a worker's downloads start
END_WAIT_S = 5.0
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


def send(
    conn: Connection,
    wants: Wants,
    payload: Payload | None,
    versions: Versions,
    end: threading.Event | None = None,
) -> None:
    """Write one worker's message from a daemon thread (see the module's docstring), and
    close the pipe once ``end`` is set (the next worker's first batch read): the end of the
    pipe tells the worker so (:class:`PipeEnd`)."""
    data = pickle.dumps((wants, payload, versions), protocol=pickle.HIGHEST_PROTOCOL)

    def write() -> None:
        try:
            conn.send_bytes(data)
            if end is not None:
                end.wait()
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
    orphaned, or ``_WAIT_S`` passed). The read end is closed unless a message came: its end
    then says that the main process has read the next worker's first batch (:class:`PipeEnd`).
    ``ppid`` is the loader's process; a worker started by a forkserver has another parent,
    whose change (the worker orphaned) is what is watched then."""
    got: tuple[Wants, Payload | None, Versions] | None = None
    try:
        deadline = time.monotonic() + _WAIT_S
        parent = os.getppid()
        if parent != ppid and parent == 1:
            return None  # orphaned already: the loader's process is gone
        while not conn.poll(0.5):
            if os.getppid() != parent or time.monotonic() > deadline:
                return None
        got = pickle.loads(conn.recv_bytes())
        return got
    except (EOFError, OSError, pickle.UnpicklingError):
        return None
    finally:
        if got is None:
            conn.close()


class PipeEnd:
    """A worker's pipe after its message: its end says that the main process has read the
    next worker's first batch too (or is gone). A :class:`~astream.runtime.prefetch.Gate`: a
    worker whose first batch came whole from the main process holds its downloads on it, so
    that they do not slow the main process's reads for the next worker, whose batch the loader
    hands out next. Only the next: with many workers, waiting for all of them would hold each
    worker's downloads for every later worker's reads."""

    def __init__(self, conn: Connection, limit_s: float | None = None) -> None:
        self.conn = conn
        self.limit_s = END_WAIT_S if limit_s is None else limit_s

    def wait(self) -> None:
        """Until the pipe ends, for at most ``limit_s``; then the read end is closed."""
        try:
            self.conn.poll(self.limit_s)  # readable at its end: nothing more is ever sent
        except OSError:
            pass
        finally:
            self.conn.close()

    def close(self) -> None:
        self.conn.close()


def _after_fork_in_child() -> None:
    # a forked worker must not hold the write ends: its own read end would never see EOF
    for w in _WRITERS:
        try:
            w.close()
        except OSError:
            pass
    _WRITERS.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


class FirstBatch(RangeReads):
    """An engine's side of the first-batch hand-over: what the main process reads for each
    worker and sends it, what a worker takes from its message, and the whole shards of
    earlier workers' first batches a worker announces before its own."""

    def share_first(
        self, plan: Any, world: Any, rank: int, worker: int, start: int, skip: int
    ) -> None:
        """The next iteration of DataLoader worker ``worker`` (> 0) announces the whole shards
        of workers ``0..worker-1``'s first batches before its own (see the module's docstring):
        those not complete in the cache and not read by ranges, in the order the loader hands
        the batches out. Nothing for worker 0, a worker resuming its own saved state (``skip``), a
        ``cache_limit`` or an explicit ``predownload``."""
        self._first_of_others = []
        if worker <= 0 or skip or self.cache_limit is not None or self.ahead_fixed:
            return
        seen: set[int] = set()
        for w in range(worker):
            first = next(iter(plan.worker_batches(world, rank, w, start)), None)
            if first is None:
                continue
            for s, _positions, _locals in batch_groups(first, self.catalog):
                if s in seen:
                    continue
                seen.add(s)
                shard = self.catalog.shards[s]
                if shard.remote is None or is_complete(shard.files.raw_path, shard.files.raw_size):
                    continue
                if not self._rangeable(s):
                    self._first_of_others.append(s)

    def _want_first_of_others(self, pf: Prefetcher) -> None:
        shards, self._first_of_others = self._first_of_others, []
        for s in shards:
            pf.want(s)

    def lead_wants(self, ids: np.ndarray[Any, np.dtype[np.int64]]) -> Wants:
        """What a worker whose first batch is ``ids`` reads by ranges (its ``_range_wants``
        in a process with nothing open)."""
        if not self.range_first_batches:
            return []
        wants = [
            (s, [int(x) for x in locals_])
            for s, _positions, locals_ in batch_groups(ids, self.catalog)
            if self._rangeable(s)
        ]
        return wants if self._ranges_pay(wants) else []

    async def lead_first(
        self,
        per_worker: list[Wants],
        writers: list[Any],
        live: list[bool] | None = None,
        under_way: threading.Event | None = None,
    ) -> None:
        """Read each worker's wanted samples (``per_worker[w]``) by ranges and send each worker
        its bytes as soon as they are complete (``None`` when the read failed: the worker then
        reads them itself). Worker by worker, worker 0's first, each worker's shard headers and
        samples together (at most ``_RANGE_GETS`` GETs at a time; a header already read for
        an earlier worker is not read again): the loader hands out worker 0's batch first, and
        on a server that serves requests side by side (CPU-bound, as moto) the GETs of one
        worker alone come back sooner than with the next workers' headers among them (on the
        images benchmark 5 of the 55 GETs before worker 0's batch was complete; on tokens the
        workers' first batches share their shards). No GET starts once ``live[0]`` is False
        (the loader's iteration is over). ``under_way`` is set once the first GET is answered
        (its requests are at the server then), or when this ends."""
        sem = asyncio.Semaphore(_RANGE_GETS)
        sent = [False] * len(per_worker)
        answered = None if under_way is None else under_way.set
        # worker w's pipe ends once worker w + 1's message is written (see PipeEnd)
        ends = [threading.Event() for _ in per_worker]
        try:
            for w, wants in enumerate(per_worker):
                got: Payload | None = None
                try:
                    if wants:
                        got = await self._range_read(wants, sem, live, answered)
                except Exception:
                    got = None
                sent[w] = True
                versions = self._versions_of(wants) if got else {}
                send(writers[w], wants, got, versions, ends[w])
                if w:
                    ends[w - 1].set()
        finally:
            if under_way is not None:
                under_way.set()
            for w, done in enumerate(sent):
                if not done:  # cancelled (the loop shutting down): no worker waits
                    send(writers[w], per_worker[w], None, {})
            for end in ends:
                end.set()

    def _objects_of(self, wants: Wants) -> list[tuple[tuple[str, str], RemoteShard]]:
        """The remote objects read by ranges for ``wants`` (each shard's data file and, for
        a split shard, its meta file), with their keys in ``Versions``."""
        out = []
        for s, _ in wants:
            shard = self.catalog.shards[s]
            for one in (shard, shard.meta):
                if one is not None and one.remote is not None:
                    out.append(((one.remote, one.raw_key), one))
        return out

    def _versions_of(self, wants: Wants) -> Versions:
        """The versions this process read of the objects of ``wants``' shards: what the
        worker it reads them for must read too."""
        keys = [k for k, _ in self._objects_of(wants)]
        return self._parts().fetcher.versions.subset(keys)

    def _lead_expected(self) -> bool:
        """In a DataLoader worker, whether its loader's main process may read its first batch
        (the pipes :meth:`_lead_take` takes its end from are there)."""
        ends = self._lead
        return ends is not None and ends.ppid != os.getpid() and dataloader_worker() is not None

    def _lead_take(self) -> Any:
        """In a DataLoader worker whose loader's main process reads its first batch: this
        worker's read end (once per iteration); else None."""
        ends, self._lead = self._lead, None
        if ends is None:
            return None
        me = dataloader_worker()
        if me is None or ends.ppid == os.getpid():
            ends.close()
            return None
        conn = ends.take(me[0])
        return None if conn is None else (conn, ends.ppid)

    def _lead_received(
        self, handoff: tuple[Any, int], wants: Wants
    ) -> tuple[dict[int, RangeShard] | None, Connection | None]:
        """The first batch's range shards the main process read for this worker, when it read
        exactly the samples of ``wants`` of each of their shards (else None: read them here),
        and the pipe, still open when a message came (see :class:`PipeEnd`; the caller closes
        it). ``wants`` may lack shards the main process read: a shard completed in the node's
        cache since the main process planned (another worker's download; this worker's own are
        held until its first batch) is read from there, and the bytes of the others are used."""
        conn = handoff[0]
        msg = receive(*handoff)
        if msg is None:
            return None, None
        try:
            return self._lead_use(msg, wants), conn
        except BaseException:
            conn.close()
            raise

    def _lead_use(
        self, msg: tuple[Wants, Payload | None, Versions], wants: Wants
    ) -> dict[int, RangeShard] | None:
        """:meth:`_lead_received`'s range shards from the message ``msg``."""
        theirs, payload, versions = msg
        mine = [(s, [int(x) for x in locals_]) for s, locals_ in wants]
        if payload is None or not mine or not _lead_covers(mine, theirs, payload):
            return None
        parts = self._parts()
        mine_v = parts.fetcher.versions
        how = "the main process read it for this worker's first batch at"
        for k, one in self._objects_of(wants):
            v = versions.get(k)
            if v is not None:  # the version those bytes came from
                mine_v.keep(k, [v], one.url(), how)
            # and their files, once any process of the node downloads them
            mine_v.expect_file(k, one.files.raw_path, one.files.raw_size, one.url())
        out = self._range_shards(parts, {s: payload[s] for s, _ in mine})
        parts.range_samples += sum(len(r.slot) for r in out.values())
        return out


def _lead_covers(mine: Wants, theirs: Wants, payload: Any) -> bool:
    """Whether the main process read each shard of ``mine`` with exactly its samples."""
    read = {s: locals_ for s, locals_ in theirs}
    return all(read.get(s) == locals_ and s in payload for s, locals_ in mine)
