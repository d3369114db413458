"""benchmarks.pss_side's split of a process tree's PSS: pages of mapped files under the data
directory count as ``data``, other mapped files (a sibling directory sharing the name's
prefix included) do not, and a child process's maps are summed with its parent's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.pss_side import tree_parts

CHILD = r"""
import mmap, sys, time
maps = []
for path in sys.argv[1:]:
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    sum(mm[i] for i in range(0, len(mm), 4096))  # touch every page
    maps.append(mm)
print("ready", flush=True)
time.sleep(60)
"""


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs /proc/PID/smaps")
def test_tree_parts_counts_mapped_data_files_only(tmp_path: Path) -> None:
    data, other = tmp_path / "data", tmp_path / "data2"  # "data2" shares the prefix
    data.mkdir()
    other.mkdir()
    (data / "a.mds").write_bytes(b"\1" * (3 << 20))
    (other / "b.mds").write_bytes(b"\2" * (5 << 20))
    # a parent that only waits, and the child that maps: the child's pages count too
    parent = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys; subprocess.run(sys.argv[1:])",
         sys.executable, "-c", CHILD, str(data / "a.mds"), str(other / "b.mds")],
        stdout=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        assert parent.stdout is not None and parent.stdout.readline().strip() == "ready"
        time.sleep(0.05)
        got = tree_parts(parent.pid, str(data))
    finally:
        os.killpg(parent.pid, signal.SIGKILL)  # the child too: it is in the same group
        parent.wait()
    mb = 1 << 20
    assert 3 * mb * 0.9 <= got["data"] <= 3 * mb + 4096  # a.mds, all of it, and only it
    assert got["lib"] >= 5 * mb * 0.9  # b.mds is another mapped file
    assert got["pss"] >= got["data"] + got["lib"]
