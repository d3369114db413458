"""A full or unwritable cache directory is a ``CacheError`` that says where, how much and what to
do -- never a bare ``OSError: [Errno 28]`` -- and leaves nothing partial that a later run trusts.

Real failures, not mocks: ENOSPC comes from a 512 KiB tmpfs mounted for the test (this needs
root: the test is skipped, saying so, where ``mount`` is refused); EACCES comes from a child
process running as root *without* CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH (``setpriv``) in a
root-owned 0o555 directory: plain root bypasses permission bits, and an unprivileged uid cannot
even run the interpreter here (it lives under /root, mode 0700).
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import subprocess
import sys

import pytest

from astream import StreamingDataset
from astream.core.index import parse_index
from astream.errors import CacheError

from .conftest import ROOT, check_samples, job_env


@pytest.fixture
def small_disk(tmpfs):
    return tmpfs(512)


def _index(path: str):
    with open(os.path.join(path, "index.json"), "rb") as f:
        return parse_index(f.read(), path)


def _consistent(local: str, src: str) -> int:
    """Every shard under its final name is whole and exact (a temporary file may still be
    there, owned by a download the error cancelled: never trusted, cleaned by the next run)."""
    whole = 0
    for e in _index(src).shards:
        p = os.path.join(local, e.raw_data.basename)
        if os.path.exists(p):
            with open(p, "rb") as a, open(os.path.join(src, e.raw_data.basename), "rb") as b:
                assert a.read() == b.read(), p
            whole += 1
    return whole


def _no_tmps(local: str) -> None:
    assert not [n for n in os.listdir(local) if ".tmp-" in n]


@pytest.mark.parametrize("limit", [None, 1_000_000])
def test_disk_full_is_a_cache_error_and_the_cache_stays_whole(small_disk, plain_src, limit):
    local = os.path.join(small_disk, "c")
    ds = StreamingDataset(remote=plain_src, local=local, batch_size=10, cache_limit=limit)
    with pytest.raises(CacheError) as e:
        list(ds)
    assert isinstance(e.value.__cause__, OSError) and e.value.__cause__.errno == errno.ENOSPC
    lim = "no cache_limit" if limit is None else f"cache_limit={limit}"
    m = re.fullmatch(
        rf"cache directory {re.escape(local)}: no space left on device writing "
        rf"{re.escape(local)}/(shard\.\d+\.mds)(\.tmp-[0-9a-f-]+)? \((\d+) bytes needed, "
        rf"{lim}\); free space there, point `local` at a bigger disk, or set cache_limit "
        r"below the free space",
        str(e.value),
    )
    assert m, str(e.value)
    sizes = {s.raw_data.basename: s.raw_data.bytes for s in _index(plain_src).shards}
    assert int(m.group(3)) == sizes[m.group(1)]
    had = _consistent(local, plain_src)
    assert 0 < had < len(sizes)
    del ds
    # room again: the same cache directory completes the epoch, fetching only what is missing
    subprocess.run(["mount", "-o", "remount,size=8m", small_disk], check=True)
    ds2 = StreamingDataset(remote=plain_src, local=local, batch_size=10, cache_limit=limit)
    check_samples(list(ds2), range(1200))
    assert ds2.stats.shards_fetched == len(sizes) - had
    _no_tmps(local)


def test_disk_full_while_inflating_compressed_shards(small_disk, zstd_src):
    """zstd shards are tiny here (the payloads repeat) and inflate to ~40 KB each: the disk
    fills while inflating, not while downloading."""
    local = os.path.join(small_disk, "c")
    ds = StreamingDataset(remote=zstd_src, local=local, batch_size=10)
    with pytest.raises(CacheError) as e:
        list(ds)
    assert e.value.__cause__.errno == errno.ENOSPC
    assert str(e.value).startswith(f"cache directory {local}: no space left on device writing ")
    need = re.search(r"\((\d+) bytes needed, no cache_limit\)", str(e.value))
    footprints = {s.raw_data.bytes + s.zip_data.bytes for s in _index(zstd_src).shards}
    assert need and int(need.group(1)) in footprints
    for s in _index(zstd_src).shards:  # what is there is whole (decompressed: raw size)
        p = os.path.join(local, s.raw_data.basename)
        assert not os.path.exists(p) or os.path.getsize(p) == s.raw_data.bytes
    del ds
    subprocess.run(["mount", "-o", "remount,size=8m", small_disk], check=True)
    check_samples(list(StreamingDataset(remote=zstd_src, local=local, batch_size=10)), range(1200))
    _no_tmps(local)


SCENARIO = r"""
import os, sys
from astream import StreamingDataset
from astream.errors import CacheError
remote, local = sys.argv[1:3]
try:
    ds = StreamingDataset(remote=remote, local=local, batch_size=10)
    os.chmod(local, 0o555)  # the shards cannot be written now
    list(ds)
    print("no error")
except CacheError as e:
    print(f"CacheError: {e} | cause errno {e.__cause__.errno}")
"""


def _without_dac(args: list[str]) -> str:
    """Run :data:`SCENARIO` as root without the capabilities that bypass permission bits
    (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH): the kernel then checks a root-owned directory's
    owner bits, and 0o555 gives a real EACCES."""
    setpriv = shutil.which("setpriv")
    if setpriv is None or os.geteuid() != 0:
        pytest.skip("needs root and setpriv (util-linux) to drop CAP_DAC_OVERRIDE")
    cmd = [setpriv, "--bounding-set=-dac_override,-dac_read_search", sys.executable, "-c"]
    p = subprocess.run(
        [*cmd, SCENARIO, *args],
        capture_output=True,
        text=True,
        env=job_env(),
        cwd=ROOT,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


def test_unwritable_cache_is_a_cache_error(tmp_path, plain_src):
    local = str(tmp_path / "cache")
    out = _without_dac([plain_src, local])
    m = re.fullmatch(
        rf"CacheError: cache directory {re.escape(local)}: cannot write: permission denied "
        rf"writing {re.escape(local)}/(shard\.\d+\.mds)\.tmp-[0-9a-f-]+ \((\d+) bytes "
        r"needed, no cache_limit\); make it writable by this user, or point `local` at a "
        rf"writable directory \| cause errno {errno.EACCES}",
        out,
    )
    assert m, out
    sizes = {s.raw_data.basename: s.raw_data.bytes for s in _index(plain_src).shards}
    assert int(m.group(2)) == sizes[m.group(1)]
    _no_tmps(local)  # the temporary file was never created
    # a directory it cannot write at all: refused at construction, naming it
    ro = str(tmp_path / "ro")
    os.mkdir(ro, 0o555)
    out = _without_dac([plain_src, ro])
    assert out.startswith(
        f"CacheError: cache directory {ro}: cannot write: permission denied writing {ro}/"
    ), out
    assert out.endswith(f"| cause errno {errno.EACCES}") and os.listdir(ro) == []
