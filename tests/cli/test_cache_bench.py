"""``astream cache`` over real cache entries, ``astream bench``, and the entry points."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

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
    info = cli("cache", "list", "--json").json()
    [e] = info["entries"]
    size = sum(
        os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root / entry) for f in fs
    )
    assert (e["name"], e["bytes"], e["samples"], e["in_use"]) == (entry, size, 200, False)
    assert e["shards"] == len(ds.shards) and info["bytes"] == size

    # a reader's pin (a shared flock, as the engine takes it) makes the entry "in use"
    pin = FileLock(lock_path(str(root / entry), "shard.00000.mds", "pin"))
    pin.shared()
    try:
        assert cli("cache", "list", "--json").json()["entries"][0]["in_use"] is True
        r = cli("cache", "clear", entry)
        assert r.code == 2
        assert r.err == (
            f"astream: error: cache entry {root / entry} is in use by a running process (--force)\n"
        )
        assert os.path.isdir(root / entry)
    finally:
        pin.release()
    r = cli("cache", "clear", entry)
    assert r.code == 0 and r.out.startswith(f"cleared 1 entries under {root}, ")
    assert os.listdir(root) == []


def test_cache_clear_arguments(cli, tmp_path):
    root = tmp_path / "r"
    (root / "a").mkdir(parents=True)
    (root / "b").mkdir()
    (root / "b" / "f").write_bytes(b"12345")
    r = cli("cache", "clear", "--dir", str(root))
    assert r.err == "astream: error: cache clear: give entry names or --all (not both)\n"
    r = cli("cache", "clear", "--dir", str(root), "..")
    assert r.err == "astream: error: cache clear: '..' is not an entry name\n"
    r = cli("cache", "clear", "--dir", str(root), "zz")
    assert r.err == f"astream: error: cache clear: no entry 'zz' under {root}\n"
    r = cli("cache", "clear", "--dir", str(root), "--all")
    assert r.out == f"cleared 2 entries under {root}, 5 B freed\n"
    assert os.listdir(root) == []


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
