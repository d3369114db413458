"""With DataLoader workers, the main process reads every worker's first batch by ranges while the
workers start, and hands each worker its bytes (astream/runtime/lead.py).

Real parts only: moto behind a FaultProxy that records every GET's Range, real DataLoader
workers (fork and spawn). What tells the main process's reads from the workers' own: each
shard's header is read once for all workers (each worker reading its own would read a header
shared by two first batches twice), and the range GETs are counted in the main process's stats.
"""

from __future__ import annotations

import gc
import os
import threading
import time
from typing import Any

import pytest

from astream import StreamingDataLoader
from astream.core.shard import header_size
from astream.core.world import World
from astream.runtime.engine import Engine
from astream.testing import FaultProxy

from .conftest import MakeProxy
from .test_first_batch import big, big_src, dataset, range_gets, s3_big, s3_opts, shard_sizes

__all__ = ["big_src", "s3_big"]  # the module fixtures of test_first_batch, shared

BS = 16


def first_shards(ds: Any, workers: int) -> list[set[int]]:
    """The shards of each worker's first batch (epoch 0, from the start)."""
    plan = ds.plan(0)
    out = []
    for w in range(workers):
        ids = next(iter(plan.worker_batches(World(1, 1, workers), 0, w, 0)))
        out.append({ds.catalog.locate_one(int(i))[0] for i in ids})
    return out


def header_gets(ds: Any, proxy: FaultProxy, sizes: dict[str, int]) -> dict[int, int]:
    """shard -> how many times its header was read by range."""
    out: dict[int, int] = {}
    for s, shard in enumerate(ds.catalog.shards):
        name = shard.raw_key.rsplit("/", 1)[-1]
        head = f"bytes=0-{header_size(ds.catalog.entries[s].samples) - 1}"
        n = sum(1 for nm, r in range_gets(proxy, sizes) if nm == name and r == head)
        if n:
            out[s] = n
    return out


def run(ds: Any, **kw: Any) -> list[list[int]]:
    ld = StreamingDataLoader(ds, batch_size=BS, num_workers=2, **kw)
    got = []
    for b in ld:
        ids = [int(x) for x in b["id"]]
        assert [bytes(x) for x in b["data"]] == [big(i) for i in ids]
        got.append(ids)
    return got


def lead_threads(wait: float = 10.0) -> list[threading.Thread]:
    """The writer threads still alive after up to ``wait`` seconds (each ends once its worker
    has read its message, or has exited: a moment after the batch that needed it)."""
    deadline = time.monotonic() + wait
    while True:
        alive = [t for t in threading.enumerate() if t.name == "astream-lead"]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


def pipe_fds() -> int:
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:")
        except OSError:
            pass
    return n


def lead_wants(ds: Any, workers: int = 2) -> list[list[tuple[int, list[int]]]]:
    """What the main process reads for each worker's first batch (epoch 0, from the start)."""
    plan = ds.plan(0)
    return [
        ds.engine.lead_wants(next(iter(plan.worker_batches(World(1, 1, workers), 0, w, 0))))
        for w in range(workers)
    ]


class Proxied:
    """moto behind a fresh recording proxy, with the big dataset's remote and shard sizes."""

    def __init__(self, proxy: FaultProxy, remote: str, sizes: dict[str, int]) -> None:
        self.proxy, self.remote, self.sizes = proxy, remote, sizes

    def dataset(self, local: str, first: int = 1) -> Any:
        return dataset(self.remote, s3_opts(self.proxy), local, first)

    def gets(self) -> list[tuple[str, str]]:
        return range_gets(self.proxy, self.sizes)


@pytest.fixture
def proxied(s3_server: Any, s3_big: str, big_src: str, make_proxy: MakeProxy) -> Proxied:
    return Proxied(make_proxy(s3_server.url), s3_big, shard_sizes(big_src))


@pytest.mark.parametrize(
    "ctx",
    [
        None,
        pytest.param("spawn", marks=pytest.mark.slow),
        pytest.param("forkserver", marks=pytest.mark.slow),
    ],
)
def test_main_reads_workers_first_batches(
    s3_server: Any,
    s3_big: str,
    big_src: str,
    make_proxy: MakeProxy,
    tmp_path: Any,
    ctx: str | None,
) -> None:
    proxy = make_proxy(s3_server.url)
    sizes = shard_sizes(big_src)
    opts = s3_opts(proxy)
    off = run(dataset(s3_big, opts, str(tmp_path / "off"), 0))
    assert range_gets(proxy, sizes) == []
    proxy.reset_stats()
    ds = dataset(s3_big, opts, str(tmp_path / "on"), 1)
    kw = {"multiprocessing_context": ctx} if ctx else {}
    assert run(ds, **kw) == off
    w0, w1 = first_shards(ds, 2)
    assert w0 & w1  # a shard in both first batches: its header is what tells who read it
    heads = header_gets(ds, proxy, sizes)
    assert set(heads) == w0 | w1 and set(heads.values()) == {1}, heads
    assert ds.engine._parts().stats.range_requests >= len(w0 | w1)  # counted here, in main
    assert not lead_threads()


def test_worker_reads_itself_when_the_bytes_differ(
    s3_server: Any,
    s3_big: str,
    big_src: str,
    make_proxy: MakeProxy,
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker uses the main process's bytes only for exactly the samples it wants: here the
    main process reads one sample fewer per shard (a stand-in for any disagreement), and each
    worker reads its first batch itself -- so the shards in both first batches have their
    header read three times (the main process, then each worker)."""
    proxy = make_proxy(s3_server.url)
    sizes = shard_sizes(big_src)
    opts = s3_opts(proxy)
    off = run(dataset(s3_big, opts, str(tmp_path / "off"), 0))
    real = Engine.lead_wants

    def fewer(self: Engine, ids: Any) -> list[tuple[int, list[int]]]:
        return [(s, loc[:-1]) for s, loc in real(self, ids)]

    monkeypatch.setattr(Engine, "lead_wants", fewer)
    proxy.reset_stats()
    ds = dataset(s3_big, opts, str(tmp_path / "on"), 1)
    assert run(ds) == off
    w0, w1 = first_shards(ds, 2)
    heads = header_gets(ds, proxy, sizes)
    assert {s: heads.get(s) for s in w0 & w1} == {s: 3 for s in w0 & w1}, heads


def test_worker_uses_the_main_bytes_of_shards_it_still_reads_by_ranges(
    s3_server: Any,
    s3_big: str,
    big_src: str,
    make_proxy: MakeProxy,
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A shard of a worker's first batch is complete in the node's cache by the time the
    worker reaches that batch (another worker's download, when this one starts late): the
    worker reads that shard from the cache and uses the main process's bytes of its other
    shards, so every header is still read once. Here worker 0 finds the shard its first batch
    shares with worker 1's in the cache (copied in by the forked worker itself, right before
    it plans its first batch's ranges)."""
    import shutil

    from astream.runtime.placement import dataloader_worker

    proxy = make_proxy(s3_server.url)
    sizes = shard_sizes(big_src)
    off = run(dataset(s3_big, s3_opts(proxy), str(tmp_path / "off"), 0))
    proxy.reset_stats()
    ds = dataset(s3_big, s3_opts(proxy), str(tmp_path / "on"), 1)
    w0, w1 = first_shards(ds, 2)
    shared = min(w0 & w1)
    files = ds.catalog.shards[shared].files
    real = Engine._range_wants

    def late(self: Engine, groups: Any, la: Any, opener: Any) -> Any:
        me = dataloader_worker()
        if me is not None and me[0] == 0 and la.batches_taken == 1:
            os.makedirs(os.path.dirname(files.raw_path), exist_ok=True)
            tmp = files.raw_path + ".copy"
            shutil.copyfile(os.path.join(big_src, files.raw), tmp)
            os.replace(tmp, files.raw_path)
        return real(self, groups, la, opener)

    monkeypatch.setattr(Engine, "_range_wants", late)  # inherited by the forked workers
    assert run(ds, multiprocessing_context="fork") == off
    heads = header_gets(ds, proxy, sizes)
    assert heads == {s: 1 for s in w0 | w1}, heads


def test_no_pipe_or_thread_left(
    s3_server: Any, s3_big: str, big_src: str, make_proxy: MakeProxy, tmp_path: Any
) -> None:
    """Three cold iterations, one of them left after its first batch: no pipe end and no
    writer thread outlives them."""
    proxy = make_proxy(s3_server.url)
    opts = s3_opts(proxy)
    before = pipe_fds()
    for k in range(3):
        ds = dataset(s3_big, opts, str(tmp_path / f"c{k}"), 1)
        ld = StreamingDataLoader(ds, batch_size=BS, num_workers=2)
        if k == 1:
            it = iter(ld)
            next(it)
            del it  # the workers shut down with their first batch barely read
        else:
            assert sum(len(b["id"]) for b in ld) == 240
    del ld, ds
    assert not lead_threads()
    from astream.runtime import lead

    assert lead._WRITERS == []  # every write end closed by its thread
    deadline = time.monotonic() + 10  # torch's own queues close as their loaders go
    while pipe_fds() != before and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.1)
    assert pipe_fds() == before


def test_no_get_once_the_iteration_is_over(
    s3_server: Any, s3_big: str, big_src: str, make_proxy: MakeProxy, tmp_path: Any
) -> None:
    """An iteration left before its workers' first batches are read: no GET starts, and each
    worker is told (None) so it never waits."""
    import pickle

    from astream import bridge
    from astream.runtime.lead import open_pipes

    proxy = make_proxy(s3_server.url)
    sizes = shard_sizes(big_src)
    ds = dataset(s3_big, s3_opts(proxy), str(tmp_path / "x"), 1)
    per_worker = lead_wants(ds)
    assert all(per_worker)
    for live, expect_bytes in (([False], False), ([True], True)):
        ends, writers = open_pipes(2)
        proxy.reset_stats()
        bridge.run(ds.engine.lead_first(per_worker, writers, live))
        for w, conn in enumerate(ends.readers):
            assert conn is not None and conn.poll(30)
            wants, payload, versions = pickle.loads(conn.recv_bytes())
            assert wants == per_worker[w] and (payload is not None) == expect_bytes
            # with the bytes, the version of each shard object they came from (moto's ETag)
            shards = ds.engine.catalog.shards
            keys = {(shards[s].remote, shards[s].raw_key) for s, _ in wants}
            assert set(versions) == (keys if expect_bytes else set())
            assert all(v.startswith('"') and len(v) > 2 for v in versions.values())
        ends.close()
        assert bool(range_gets(proxy, sizes)) == expect_bytes


class LeadGets:
    """What the main process reads for each worker's first batch, as the proxy sees it: each
    worker's sample ranges (shard file, first byte) and every shard's header range."""

    def __init__(self, ds: Any, big_src: str, workers: int) -> None:
        import numpy as np

        self.starts: list[set[tuple[str, int]]] = [set() for _ in range(workers)]
        self.names: list[list[str]] = [[] for _ in range(workers)]  # each worker's shard files
        for w, wants in enumerate(lead_wants(ds, workers)):
            for s, locals_ in wants:
                name = ds.catalog.shards[s].raw_key.rsplit("/", 1)[-1]
                self.names[w].append(name)
                n = ds.catalog.entries[s].samples
                with open(os.path.join(big_src, name), "rb") as f:
                    offsets = np.frombuffer(f.read(header_size(n)), np.uint32)[1:]
                self.starts[w] |= {(name, int(offsets[li])) for li in locals_}
        self.heads = {
            shard.raw_key.rsplit("/", 1)[-1]: f"bytes=0-{header_size(entry.samples) - 1}"
            for shard, entry in zip(ds.catalog.shards, ds.catalog.entries)
        }

    def own(self, w: int) -> set[tuple[str, int]]:
        """The samples only worker ``w`` reads."""
        others = set().union(*(x for v, x in enumerate(self.starts) if v != w))
        return self.starts[w] - others

    def lead_read(self, name: str, rng: str) -> bool:
        """A header or a run of wanted samples: what the main process reads."""
        if rng == self.heads[name]:
            return True
        return rng.startswith("bytes=") and any(
            (name, int(rng[6:].split("-")[0])) in x for x in self.starts
        )


def test_worker_zero_samples_first(
    s3_server: Any, s3_big: str, big_src: str, make_proxy: MakeProxy, tmp_path: Any
) -> None:
    """Worker 0's headers and sample ranges, then worker 1's (its headers not read for worker
    0 and its samples): as they reach the server, none of worker 1's GETs comes before the
    last of worker 0's, and each header is read once."""
    proxy = make_proxy(s3_server.url)
    sizes = shard_sizes(big_src)
    ds = dataset(s3_big, s3_opts(proxy), str(tmp_path / "o"), 1)
    lead = LeadGets(ds, big_src, 2)
    # (shard file, first byte of a sample) -> the last worker whose batch reads it
    owner = {k: w for w, starts in enumerate(lead.starts) for k in starts}
    head_of: dict[str, int] = {}  # shard file -> the first worker whose batch reads it
    for w, names in enumerate(lead.names):
        for name in names:
            head_of.setdefault(name, w)
    assert set(head_of.values()) == {0, 1}  # worker 1 has a shard of its own (a header to read)
    proxy.reset_stats()
    assert sum(len(b["id"]) for b in StreamingDataLoader(ds, batch_size=BS, num_workers=2)) == 240
    order, heads = [], []
    for name, rng in range_gets(proxy, sizes):
        start = int(rng.split("=")[1].split("-")[0])
        if start > 0:  # a sample range
            order.append(owner[(name, start)])
        else:  # a header (from byte 0)
            order.append(head_of[name])
            heads.append(name)
    assert order and set(order) == {0, 1}
    assert order == sorted(order), order
    assert sorted(heads) == sorted(head_of), heads


def _wait_for_message(ends: Any, ppid: int) -> None:
    from astream.runtime.lead import receive

    conn = ends.take(0)
    t0 = time.monotonic()
    got = receive(conn, ppid)
    os._exit(0 if got is None and time.monotonic() - t0 < 20 else 1)


def test_worker_stops_waiting_when_the_sender_is_gone() -> None:
    """A forked worker holds no write end of its own pipe (closed at fork), so when the main
    process's end goes (its process killed, here closed without a message) the worker sees the
    pipe end at once and reads its ranges itself, instead of waiting out ``_WAIT_S``."""
    import multiprocessing

    from astream.runtime.lead import close_writers, open_pipes

    ends, writers = open_pipes(1)
    p = multiprocessing.get_context("fork").Process(
        target=_wait_for_message, args=(ends, os.getpid())
    )
    p.start()
    ends.close()
    time.sleep(0.5)  # the worker is waiting on its pipe
    close_writers(writers)
    p.join(30)
    try:
        assert p.exitcode == 0
    finally:
        if p.is_alive():
            p.kill()
            p.join()


class _SlowFirst:
    """torch's default collate, but its first call in each worker notes when it starts and ends
    (``times[2w]``, ``times[2w + 1]`` for worker ``w``, shared with the test) and takes 1.5 s."""

    def __init__(self, times: Any) -> None:
        self.times = times
        self.pid = 0

    def __call__(self, samples: list[Any]) -> Any:
        from torch.utils.data import default_collate, get_worker_info

        if self.pid != os.getpid():
            self.pid = os.getpid()
            info = get_worker_info()
            assert info is not None
            self.times[2 * info.id] = time.monotonic()
            time.sleep(1.5)
            self.times[2 * info.id + 1] = time.monotonic()
        return default_collate(samples)


def test_worker_downloads_wait_until_its_first_batch_is_handed_over(
    s3_server: Any, s3_big: str, big_src: str, make_proxy: MakeProxy, tmp_path: Any
) -> None:
    """A worker whose whole first batch came from the main process starts its whole-shard
    downloads at its next batch, not while the first is collated and handed over: no
    whole-shard GET reaches the server before a worker's first collate has ended."""
    import multiprocessing

    proxy = make_proxy(s3_server.url)
    sizes = shard_sizes(big_src)
    whole = {name: ("", f"bytes=0-{n - 1}") for name, n in sizes.items()}
    ds = dataset(s3_big, s3_opts(proxy), str(tmp_path / "o"), 1)
    times = multiprocessing.Array("d", 4, lock=False)
    seen: list[float] = []  # when each whole-shard GET was first seen at the proxy
    stop = threading.Event()

    def watch() -> None:
        done = 0
        while not stop.is_set():
            got = list(proxy.stats.ranges)
            now = time.monotonic()
            for path, rng in got[done:]:
                name = path.rsplit("/", 1)[-1]
                if name in whole and rng in whole[name]:
                    seen.append(now)
            done = len(got)
            time.sleep(0.01)

    proxy.reset_stats()
    t = threading.Thread(target=watch, daemon=True)
    t.start()
    ld = StreamingDataLoader(ds, batch_size=BS, num_workers=2, collate_fn=_SlowFirst(times))
    try:
        assert sum(len(b["id"]) for b in ld) == 240
    finally:
        stop.set()
        t.join()
    assert ds.engine._parts().stats.range_requests > 0  # the main process read them
    assert all(times) and seen  # both workers collated; shards were downloaded
    first_end = min(times[1], times[3])
    assert min(seen) >= first_end, (min(seen) - first_end, list(times))


@pytest.mark.timeout(120)
@pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")
@pytest.mark.parametrize("workers", [2, 3])
def test_worker_downloads_wait_for_the_next_workers_first_batch(
    s3_server: Any,
    s3_big: str,
    big_src: str,
    make_proxy: MakeProxy,
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
    workers: int,
) -> None:
    """Worker 0, its first batch handed over, starts no download while the main process is
    still reading worker 1's first batch, and only that one: the sample GETs only the last
    worker wants are held at the server. With 2 workers no shard GET but the main process's
    ranges reaches the server while they are held; with 3, once worker 1's batch is out,
    worker 0's downloads run although worker 2's reads are still held. Then the epoch
    completes, byte-equal."""
    import astream.runtime.lead

    # no wait ends on its limit within this test (the forked workers inherit it)
    monkeypatch.setattr(astream.runtime.lead, "END_WAIT_S", 60.0)
    proxy = make_proxy(s3_server.url)
    sizes = shard_sizes(big_src)
    ds = dataset(s3_big, s3_opts(proxy), str(tmp_path / "o"), 1)
    lead = LeadGets(ds, big_src, workers)
    last = lead.own(workers - 1)
    assert last  # the last worker has samples of its own to read

    def lasts(method: str, path: str, rng: str) -> bool:
        name = path.rsplit("/", 1)[-1]
        if not rng.startswith("bytes=") or name not in sizes:
            return False
        return (name, int(rng[6:].split("-")[0])) in last

    def downloads() -> list[tuple[str, str]]:
        return [g for g in shard_gets_of(proxy, sizes) if not lead.lead_read(*g)]

    gate = proxy.hold(lasts)
    proxy.reset_stats()
    it = iter(StreamingDataLoader(ds, batch_size=BS, num_workers=workers))
    out = []
    try:
        # the batches of every worker but the last, while the last one's samples are held
        out = [next(it) for _ in range(workers - 1)]
        # the main process is still reading the last worker's batch: its own samples' GETs
        # reach the proxy and wait there (they may come just after the earlier batches)
        deadline = time.monotonic() + 20.0
        while not proxy.stats.held and time.monotonic() < deadline:
            time.sleep(0.01)
        assert proxy.stats.held
        if workers == 2:
            time.sleep(1.5)  # worker 0 has started its next batch by now
            assert shard_gets_of(proxy, sizes) and downloads() == []
        else:
            deadline = time.monotonic() + 20.0
            while not downloads() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert downloads()  # the last worker's reads are held until gate.set() below
    finally:
        gate.set()
    ids: list[int] = []
    for b in [*out, *it]:
        got = [int(x) for x in b["id"]]
        assert [bytes(x) for x in b["data"]] == [big(i) for i in got]
        ids += got
    assert sorted(ids) == list(range(240))
    assert downloads()  # and the downloads ran


def shard_gets_of(proxy: FaultProxy, sizes: dict[str, int]) -> list[tuple[str, str]]:
    """(shard file, Range) of every GET of a shard so far, whole downloads included."""
    return [
        (path.rsplit("/", 1)[-1], rng)
        for path, rng in list(proxy.stats.ranges)
        if path.rsplit("/", 1)[-1] in sizes
    ]


def test_pipe_end_waits_for_the_end_at_most_its_limit() -> None:
    """A worker's wait for the next worker's first batch ends when the main process closes
    the pipe, or after ``limit_s`` when it never does; the read end is closed either way."""
    from astream.runtime.lead import PipeEnd, close_writers, open_pipes

    ends, writers = open_pipes(1)
    conn = ends.take(0)
    assert conn is not None
    try:
        t0 = time.monotonic()
        PipeEnd(conn, 0.3).wait()  # the write end stays open: the limit ends the wait
        waited = time.monotonic() - t0
        assert 0.25 <= waited < 2.0, waited
        assert conn.closed
    finally:
        close_writers(writers)
    ends, writers = open_pipes(1)
    conn = ends.take(0)
    assert conn is not None
    timer = threading.Timer(0.2, close_writers, args=(writers,))
    timer.start()
    t0 = time.monotonic()
    PipeEnd(conn, 30.0).wait()  # the main process closes its end after 0.2 s
    waited = time.monotonic() - t0
    timer.join()
    assert 0.15 <= waited < 5.0, waited
    assert conn.closed


def test_pipes_hold_a_whole_batch_in_few_writes() -> None:
    """Each worker's pipe buffer is 1 MiB where the system allows it (not 64 KiB): a 3 MB
    message of image samples then crosses in 3-4 writes instead of ~50."""
    import fcntl

    from astream.runtime.lead import close_writers, open_pipes

    with open("/proc/sys/fs/pipe-max-size") as f:
        if int(f.read()) < 1 << 20:
            pytest.skip("this system's pipe-max-size is below 1 MiB")
    ends, writers = open_pipes(2)
    try:
        assert [fcntl.fcntl(w.fileno(), fcntl.F_GETPIPE_SZ) for w in writers] == [1 << 20] * 2
    finally:
        ends.close()
        close_writers(writers)


@pytest.mark.timeout(120)
def test_column_batches_after_a_handed_over_first_batch(
    s3_server: Any, s3_big: str, big_src: str, make_proxy: MakeProxy, tmp_path: Any
) -> None:
    """Column batches (``batch_format``) with workers whose whole first batch came from the
    main process: the downloads that hand-over left held start before any later batch waits on
    one (the batch path's later batches skip the range step that releases them), and every
    sample arrives once, byte-equal."""
    proxy = make_proxy(s3_server.url)
    ds = dataset(s3_big, s3_opts(proxy), str(tmp_path / "c"), 1)
    ld = StreamingDataLoader(
        ds, batch_size=BS, num_workers=2, batch_format="numpy", ragged="offsets"
    )
    ids: list[int] = []
    for b in ld:
        got = [int(x) for x in b["id"]]
        data, offs = b["data"], b["data_offsets"]
        assert [data[offs[k] : offs[k + 1]].tobytes() for k in range(len(got))] == [
            big(i) for i in got
        ]
        ids += got
    assert sorted(ids) == list(range(240))
    assert ds.engine._parts().stats.range_requests > 0  # the main process read first batches


def test_reads_are_handed_to_the_loop_before_any_worker_starts(
    proxied: Proxied, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first batches' GETs go out while torch starts the workers (forking a process that
    has imported torch takes tens of ms), not after: ``lead_first`` is submitted to the loop
    before the first worker process is started, and the batches are still exact."""
    import multiprocessing.process

    events: list[str] = []
    real_lead, real_start = Engine.lead_first, multiprocessing.process.BaseProcess.start

    def lead_first(self: Engine, *a: Any, **k: Any) -> Any:
        events.append("lead")
        return real_lead(self, *a, **k)

    def start(self: Any) -> None:
        events.append("start")
        real_start(self)

    monkeypatch.setattr(Engine, "lead_first", lead_first)
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", start)
    ds = proxied.dataset(str(tmp_path / "c"))
    got = run(ds)
    assert events[:3] == ["lead", "start", "start"], events
    assert sorted(i for b in got for i in b) == list(range(len(ds)))
    w0, w1 = first_shards(ds, 2)  # headers read by the main process, once each
    assert set(header_gets(ds, proxied.proxy, proxied.sizes)) == w0 | w1
    assert not lead_threads()


def test_workers_that_fail_to_start_leave_no_pipe_or_thread(
    proxied: Proxied, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first worker process fails to start (as a fork refused for memory would) after the
    first batches' reads were submitted: the error reaches the caller, the reads end (each
    message finds no reader), and no pipe end, writer thread or write end is left; the next
    iteration runs whole."""
    import multiprocessing.process

    from astream.runtime import lead

    class Refused(OSError):
        pass

    real_start = multiprocessing.process.BaseProcess.start
    starts: list[int] = []

    def fail(self: Any) -> None:
        starts.append(1)
        time.sleep(0.2)  # the main process's reads are under way meanwhile
        raise Refused("no workers today")

    ld = StreamingDataLoader(proxied.dataset(str(tmp_path / "f")), batch_size=BS, num_workers=2)
    before = pipe_fds()
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", fail)
    with pytest.raises(Refused, match="no workers today"):
        next(iter(ld))
    assert starts == [1]  # the fault happened where it claims: at the first worker's start
    assert proxied.gets()  # the reads had begun
    deadline = time.monotonic() + 10  # they end on their own: no GET starts, messages dropped
    while (lead._WRITERS or pipe_fds() != before) and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.1)
    assert lead._WRITERS == [] and pipe_fds() == before and not lead_threads()
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", real_start)
    assert sorted(int(i) for b in ld for i in b["id"]) == list(range(240))


def test_under_way_is_set_at_the_first_answer(proxied: Proxied, tmp_path: Any) -> None:
    """``lead_first`` tells the loader when its requests are at the server (the workers are
    forked then, runtime/lead.py): at the first answer, a shard header's, when no sample range
    can have been asked for yet (each follows its header); and when it ends without a GET."""
    from astream import bridge
    from astream.runtime.lead import open_pipes

    ds = proxied.dataset(str(tmp_path / "u"))
    per_worker = lead_wants(ds)
    heads = {
        (shard.raw_key.rsplit("/", 1)[-1], f"bytes=0-{header_size(e.samples) - 1}")
        for shard, e in zip(ds.catalog.shards, ds.catalog.entries)
    }

    class Seen(threading.Event):
        at: list[tuple[str, str]] | None = None

        def set(self) -> None:
            if self.at is None:
                self.at = proxied.gets()
            super().set()

    for live in ([False], [True]):
        proxied.proxy.reset_stats()
        ends, writers = open_pipes(2)
        seen = Seen()
        bridge.run(ds.engine.lead_first(per_worker, writers, live, seen))
        assert seen.is_set() and seen.at is not None
        if live[0]:
            assert seen.at and set(seen.at) <= heads, seen.at  # headers only, so far
            assert set(proxied.gets()) - heads  # ... then the samples' ranges
        else:
            assert seen.at == [] and proxied.gets() == []
        for conn in ends.readers:
            assert conn is not None and conn.poll(30)
            conn.recv_bytes()
        ends.close()


def test_reads_that_cannot_be_submitted_leave_no_pipe(
    proxied: Proxied, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Handing the reads to the loop fails (no reads will drop the write ends): the error
    reaches the caller and the loader closes both ends itself; the next iteration is whole."""
    from astream.runtime import lead
    from astream.torch import dataloader

    class NoLoop(RuntimeError):
        pass

    real = dataloader.bridge.submit
    calls: list[int] = []

    def refuse(coro: Any) -> Any:
        calls.append(1)
        coro.close()
        raise NoLoop("the loop is gone")

    ld = StreamingDataLoader(proxied.dataset(str(tmp_path / "n")), batch_size=BS, num_workers=2)
    before = pipe_fds()
    monkeypatch.setattr(dataloader.bridge, "submit", refuse)
    with pytest.raises(NoLoop, match="the loop is gone"):
        next(iter(ld))
    monkeypatch.setattr(dataloader.bridge, "submit", real)
    assert calls == [1] and proxied.gets() == []
    assert lead._WRITERS == []
    deadline = time.monotonic() + 10
    while pipe_fds() != before and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.1)
    assert pipe_fds() == before
    assert sorted(int(i) for b in ld for i in b["id"]) == list(range(240))


def test_a_message_that_cannot_be_used_closes_the_pipe() -> None:
    """When using the main process's message raises (here a stand-in engine's ``_lead_use``
    does), the error reaches the caller and the worker's read end is closed then, not left
    open until the collector finds it."""
    from astream.runtime.lead import FirstBatch, close_writers, open_pipes, send

    class Refused(Exception):
        pass

    class Engine:
        def _lead_use(self, msg: Any, wants: Any) -> Any:
            raise Refused(msg[0])

    ends, writers = open_pipes(1)
    conn = ends.take(0)
    assert conn is not None
    try:
        send(writers[0], [(0, [1, 2])], None, {})
        with pytest.raises(Refused) as e:
            FirstBatch._lead_received(Engine(), (conn, os.getppid()), [(0, [1, 2])])  # type: ignore[arg-type]
        assert e.value.args == ([(0, [1, 2])],)  # the message itself came through
        assert conn.closed
    finally:
        close_writers(writers)
