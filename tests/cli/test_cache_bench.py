"""``astream cache`` over real cache entries, ``astream bench``, and the entry points."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import uuid
import weakref

import pytest

from astream import StreamingDataset
from astream.runtime.locks import FileLock, lock_path
from astream.storage.sync import upload
from tests.cli.test_inspect_verify import _write

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def s3_plain(tmp_path, s3_bucket):
    path = str(tmp_path / "plain")
    _write(path, hashes=["xxh64"])
    url = f"{s3_bucket}/cache-{uuid.uuid4().hex[:8]}"
    upload(path, url)
    return url


def test_cache_list_and_clear_real_entries(cli, tmp_path, monkeypatch, s3_plain):
    root = tmp_path / "cache-root"
    monkeypatch.setenv("ASTREAM_CACHE_DIR", str(root))
    r = cli("cache", "list")
    assert r.out == f"cache root {root}: 0 entries, 0 B\n"
    ds = StreamingDataset(remote=s3_plain, batch_size=10)
    assert len(list(ds)) == 200
    [entry] = os.listdir(root)
    # the dataset lives: this process holds the entry's lease
    info = cli("cache", "list", "--json").json()
    [e] = info["entries"]
    assert (e["in_use"], e["pids"], e["remote"]) == (True, [os.getpid()], s3_plain)
    r = cli("cache", "clear", entry)
    assert r.code == 2
    assert r.err == (
        f"astream: error: cache entry {root / entry} is in use by pid {os.getpid()}; stop it "
        "first, or pass --force to delete it anyway\n"
    )
    wc = weakref.ref(ds.catalog)
    del ds
    _forget()
    assert wc() is None  # the dataset is gone: so is its lease
    info = cli("cache", "list", "--json").json()
    [e] = info["entries"]
    size = sum(
        os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root / entry) for f in fs
    )
    assert (e["name"], e["bytes"], e["samples"], e["in_use"]) == (entry, size, 200, False)
    assert e["shards"] == 5 and info["bytes"] == size and info["not_entries"] == []

    # a reader's pin (a shared flock, as the engine takes it) makes the entry "in use", and
    # /proc/locks names its holder
    pin = FileLock(lock_path(str(root / entry), "shard.00000.mds", "pin"))
    pin.shared()
    try:
        assert cli("cache", "list", "--json").json()["entries"][0]["in_use"] is True
        r = cli("cache", "clear", entry)
        assert r.code == 2
        assert r.err == (
            f"astream: error: cache entry {root / entry} is in use by pid {os.getpid()}; stop "
            "it first, or pass --force to delete it anyway\n"
        )
        assert os.path.isdir(root / entry)
    finally:
        pin.release()
    r = cli("cache", "clear", entry)
    assert r.code == 0 and r.out.startswith(f"cleared 1 entries under {root}, ")
    assert os.listdir(root) == []


def _forget():
    """Collect what the caller deleted. On Python 3.11 a frame whose ``f_locals`` was read
    (the dataset looks for a DataLoader iterator up the stack) keeps a snapshot of its locals
    until it is read again: refresh the caller's, then collect."""
    sys._getframe(1).f_locals  # noqa: B018
    gc.collect()


def _entry(root, name, n=20):
    """A directory as astream makes one: an MDS dataset's index and shards, marked."""
    from astream.runtime.binding import mark_entry
    from tests.reliability.conftest import write_ds

    d = root / name
    write_ds(str(d), n)
    mark_entry(str(d), "s3://b/" + name)
    return d


def test_cache_clear_arguments(cli, tmp_path):
    root = tmp_path / "r"
    _entry(root, "a")
    _entry(root, "b")
    r = cli("cache", "clear", "--dir", str(root))
    assert r.err == "astream: error: cache clear: give entry names or --all (not both)\n"
    r = cli("cache", "clear", "--dir", str(root), "..")
    assert r.err == "astream: error: cache clear: '..' is not an entry name\n"
    r = cli("cache", "clear", "--dir", str(root), "zz")
    assert r.err == f"astream: error: cache clear: no entry 'zz' under {root}\n"
    r = cli("cache", "clear", "--dir", str(root), "--all")
    assert r.out.startswith(f"cleared 2 entries under {root}, ")
    assert os.listdir(root) == []


def _tree(path):
    out = {}
    for d, _, fs in os.walk(path):
        for f in fs:
            with open(os.path.join(d, f), "rb") as fh:
                out[os.path.relpath(os.path.join(d, f), path)] = fh.read()
    return out


def test_cache_never_deletes_what_astream_did_not_create(cli, tmp_path, monkeypatch, s3_plain):
    """Issue 12: `clear --all --dir D` deleted every sub-directory of D (photos, a converted
    dataset), and so did ASTREAM_CACHE_DIR pointed at a data folder."""
    from astream.cli.common import human_bytes
    from tests.reliability.conftest import write_ds

    data = tmp_path / "data"
    (data / "photos").mkdir(parents=True)
    (data / "photos" / "cat.jpg").write_bytes(b"\xff\xd8 not really a jpeg")
    write_ds(str(data / "converted"), 50)  # an MDSWriter output: index.json and shards
    ours = _entry(data, "ours")
    (ours / "shard.00000.mds.tmp-12-ab").write_bytes(b"partial")  # a dead download's: ours
    mine = _entry(data, "mine")
    (mine / "notes.txt").write_text("a file a person put into an entry")
    before = _tree(data)

    r = cli("cache", "list", "--dir", str(data))
    assert r.out.splitlines()[0].startswith(f"cache root {data}: 2 entries, ")
    assert [x.split()[0] for x in r.out.splitlines()[1:3]] == ["mine", "ours"]
    assert r.out.splitlines()[-1] == (
        "not astream cache entries (never cleared): converted, photos"
    )
    r = cli("cache", "clear", "--dir", str(data), "photos")
    assert r.code == 2 and r.err == (
        f"astream: error: {data / 'photos'} is not an astream cache entry (astream did not "
        "create it: no .astream/entry mark); delete it yourself if you mean to\n"
    )
    r = cli("cache", "clear", "--dir", str(data), "mine")
    assert r.code == 2 and r.err == (
        f"astream: error: cache entry {data / 'mine'} holds files astream did not put there "
        "(notes.txt); move them out or delete it yourself\n"
    )
    r = cli("cache", "clear", "--dir", str(data), "--all")
    assert r.code == 2  # all or nothing: refused because of `mine`
    assert _tree(data) == before
    (mine / "notes.txt").unlink()
    freed = sum(len(v) for k, v in _tree(data).items() if k.split("/")[0] in ("ours", "mine"))
    r = cli("cache", "clear", "--dir", str(data), "--all")
    assert r.code == 0, r.err
    assert r.out.splitlines() == [
        f"cleared 2 entries under {data}, {human_bytes(freed)} freed",
        "left alone (not astream cache entries): converted, photos",
    ]
    assert sorted(os.listdir(data)) == ["converted", "photos"]
    assert {k: v for k, v in before.items() if k.split("/")[0] in ("converted", "photos")} == (
        _tree(data)
    )

    # ASTREAM_CACHE_DIR at the data folder: the dataset's own directory is an entry, the rest not
    monkeypatch.setenv("ASTREAM_CACHE_DIR", str(data))
    ds = StreamingDataset(remote=s3_plain, batch_size=10)
    assert len(list(ds)) == 200
    del ds
    _forget()
    [mine_now] = [e["name"] for e in cli("cache", "list", "--json").json()["entries"]]
    r = cli("cache", "clear", "--all")
    assert r.code == 0 and r.out.splitlines()[0].startswith("cleared 1 entries")
    assert sorted(os.listdir(data)) == ["converted", "photos"] and mine_now not in os.listdir(data)
    # and a dataset read in place, or an MDSWriter output used as `local`, is never an entry
    StreamingDataset(local=str(data / "converted"), batch_size=10)
    assert cli("cache", "list", "--json").json()["entries"] == []


HOLDER = r"""
import sys, time
from torch.utils.data import DataLoader
from astream import StreamingDataset
ds = StreamingDataset(remote=sys.argv[1], batch_size=5)
it = iter(DataLoader(ds, batch_size=5, num_workers=2, collate_fn=list))  # _workers: processes
next(it), next(it)  # batch 0 from worker 0, batch 1 from worker 1: both hold their lease
print(" ".join(str(w.pid) for w in it._workers), flush=True)
sys.stdin.readline()
"""


def test_cache_shows_every_process_of_a_live_job_and_refuses_it(
    cli, tmp_path, monkeypatch, s3_plain
):
    root = tmp_path / "root"
    remote = s3_plain
    env = {**os.environ, "ASTREAM_CACHE_DIR": str(root), "PYTHONPATH": ROOT}
    p = subprocess.Popen(
        [sys.executable, "-c", HOLDER, remote],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    try:
        workers = sorted(int(x) for x in p.stdout.readline().split())
        assert len(workers) == 2, p.stderr.read() if p.poll() is not None else "no pids"
        monkeypatch.setenv("ASTREAM_CACHE_DIR", str(root))
        [e] = cli("cache", "list", "--json").json()["entries"]
        assert e["in_use"] is True and e["pids"] == sorted([p.pid, *workers])
        r = cli("cache", "clear", "--all")
        assert r.code == 2
        assert r.err == (
            f"astream: error: cache entry {root / e['name']} is in use by pids "
            f"{', '.join(map(str, sorted([p.pid, *workers])))}; stop it first, or pass --force "
            "to delete it anyway\n"
        )
        assert os.path.isdir(root / e["name"])
        # every pid, in order (the job's own pid is not always the lowest: pids wrap)
        pids = ", ".join(map(str, sorted([p.pid, *workers])))
        assert f"in use by pids {pids}\n" in cli("cache", "list").out
    finally:
        p.stdin.close()
        p.wait(timeout=60)
    # the job ended: its leases died with it (a killed job's too: flocks)
    [e] = cli("cache", "list", "--json").json()["entries"]
    assert (e["in_use"], e["pids"]) == (False, [])
    assert cli("cache", "clear", "--all").code == 0 and os.listdir(root) == []


def test_cache_clear_force_deletes_an_entry_in_use(cli, tmp_path, monkeypatch, s3_plain):
    root = tmp_path / "root"
    monkeypatch.setenv("ASTREAM_CACHE_DIR", str(root))
    ds = StreamingDataset(remote=s3_plain, batch_size=10)
    [name] = os.listdir(root)
    r = cli("cache", "clear", "--force", name)
    assert r.code == 0 and os.listdir(root) == []
    del ds


def test_bench_local_pass(cli, tmp_path):
    path = str(tmp_path / "d")
    _write(path)
    r = cli(
        "bench",
        path,
        "--num-workers",
        "0",
        "--max-samples",
        "90",
        "--batch-size",
        "25",
        "--random",
        "5",
        "--json",
    )
    assert r.code == 0, r.err
    out = r.json()
    assert out["samples"] == 100 and out["samples_per_s"] > 0 and out["random_median_ms"] > 0
    assert out["metrics"]["samples"] >= 100


def test_bench_s3_with_workers(cli, s3_plain):
    from astream.cli.common import read_index

    stored = sum(s.raw_data.bytes for s in read_index(s3_plain).shards)
    r = cli("bench", s3_plain, "--num-workers", "2", "--random", "3", "--batch-size", "8")
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert lines[0] == f"dataset         {s3_plain}"
    assert lines[3].startswith("epoch pass      200 samples in ")  # 200 % 8 == 0: no padding
    assert lines[-1] == "order           shuffled, shuffle_algo='py1e' (the default)"
    out = cli("bench", s3_plain, "--num-workers", "2", "--random", "0", "--json").json()
    # both workers' counters reach the main process: every shard fetched exactly once
    assert out["metrics"]["bytes_fetched"] == stored
    assert out["metrics"]["shards_fetched"] == len(read_index(s3_plain).shards)
    assert out["metrics"]["processes"] == 3


def test_bench_harness_is_forwarded(tmp_path):
    p = subprocess.run(
        [sys.executable, "-m", "astream", "bench", "--harness", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    assert "usage: python -m benchmarks.run" in p.stdout
    p = subprocess.run(
        [sys.executable, "-m", "astream", "bench", "--harness"],
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert p.returncode == 2
    assert p.stderr.startswith("astream: error: --harness needs benchmarks/run.py")


def test_bench_needs_url(cli):
    assert cli("bench").err == "astream: error: bench: give a dataset URL (or --harness ...)\n"


def test_console_script_and_module_agree(tmp_path):
    exe = os.path.join(os.path.dirname(sys.executable), "astream")
    a = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
    b = subprocess.run(
        [sys.executable, "-m", "astream", "--version"], capture_output=True, text=True, timeout=60
    )
    assert a.stdout == b.stdout == "astream 0.1.0\n"
    c = subprocess.run([exe, "inspect", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert c.returncode == 2 and "Traceback" not in c.stderr
    assert (
        c.stderr
        == f"astream: error: no index.json (is this an MDS dataset?) [{tmp_path}/index.json]\n"
    )


FORKER = r"""
import os, sys, time
from astream import StreamingDataset
ds = StreamingDataset(remote=sys.argv[1], batch_size=10)
r, w = os.pipe()
child = os.fork()
if child == 0:  # a forked child that never touches the dataset: it holds no lease of its own
    os.close(r)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)  # let the test's pipes close when the parent exits
    os.write(w, b"x")
    time.sleep(60)
    os._exit(0)
os.read(r, 1)
print(child, flush=True)
os._exit(0)  # the parent dies at once; its lease must die with it
"""


def test_a_forked_child_does_not_keep_its_dead_parents_lease(cli, tmp_path, monkeypatch, s3_plain):
    root = tmp_path / "root"
    env = {**os.environ, "ASTREAM_CACHE_DIR": str(root), "PYTHONPATH": ROOT}
    p = subprocess.run(
        [sys.executable, "-c", FORKER, s3_plain],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    child = int(p.stdout)
    try:
        monkeypatch.setenv("ASTREAM_CACHE_DIR", str(root))
        [e] = cli("cache", "list", "--json").json()["entries"]
        assert (e["in_use"], e["pids"]) == (False, [])
    finally:
        os.kill(child, 9)
