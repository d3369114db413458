"""Where the running jobs of a node leave their figures, so that ``astream top`` finds them.

Theory of operation
-------------------
Every :class:`~astream.metrics.Metrics` owns one directory, ``<runtime>/jobs/<pid>-<random>/``,
where ``<runtime>`` is ``$ASTREAM_RUNTIME_DIR``, else ``$XDG_RUNTIME_DIR/astream``, else
``<tmp>/astream-<uid>`` (private to the user, mode 0700). In it:

- ``job.json``: who the job is -- the main process's pid, rank, command line, start time, the
  dataset's streams and the Prometheus endpoint's URL if one is serving -- written once at
  start and again when the endpoint starts (temp file + rename, so a reader never sees half);
- ``proc-<pid>.json``: the latest record (:mod:`astream.metrics.record`) of each process of the
  job, the main process included, rewritten every ``interval`` seconds by that process.

Readers (:func:`jobs`) list the directories, keep those whose main process is alive, and read
the files as they are; a job killed with SIGKILL leaves a directory that readers skip and that
the next :class:`Metrics` of the node removes (:func:`prune`). Nothing here binds a port or
holds a lock: discovery is a directory listing.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Job", "jobs", "new_job_dir", "prune", "runtime_dir", "write_json"]

JOB_FILE = "job.json"
PROC_PREFIX = "proc-"


def runtime_dir(override: str | None = None) -> str:
    """The node's astream runtime directory for this user (not created)."""
    if override:
        return os.path.abspath(override)
    env = os.environ.get("ASTREAM_RUNTIME_DIR")
    if env:
        return os.path.abspath(env)
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isdir(xdg):
        return os.path.join(xdg, "astream")
    return os.path.join(tempfile.gettempdir(), f"astream-{os.getuid()}")


def _jobs_root(override: str | None) -> str:
    return os.path.join(runtime_dir(override), "jobs")


def new_job_dir(override: str | None = None) -> str:
    root = _jobs_root(override)
    os.makedirs(root, mode=0o700, exist_ok=True)
    return tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=root)


def write_json(path: str, obj: Any) -> None:
    """Replace ``path`` with ``obj`` as JSON, atomically for readers. The temporary file is
    this thread's own: two threads of a process replacing one record at once (a worker's
    periodic publish and its final one) never write into each other's file."""
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, path)


def _read_json(path: str) -> Any:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None  # gone, or replaced while we read it: the next read sees the new one


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive, not ours to judge
    return True


def read_records(directory: str, *, skip_pid: int | None = None) -> list[dict[str, Any]]:
    """Every ``proc-<pid>.json`` record of a job directory."""
    out: list[dict[str, Any]] = []
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return out
    for name in names:
        if not (name.startswith(PROC_PREFIX) and name.endswith(".json")):
            continue
        if skip_pid is not None and name == f"{PROC_PREFIX}{skip_pid}.json":
            continue
        rec = _read_json(os.path.join(directory, name))
        if isinstance(rec, dict) and isinstance(rec.get("counters"), dict):
            out.append(rec)
    return out


@dataclass
class Job:
    directory: str
    info: dict[str, Any]
    records: list[dict[str, Any]] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return int(self.info.get("pid", -1))


def jobs(override: str | None = None) -> list[Job]:
    """The running jobs of this node (main process alive), oldest first."""
    root = _jobs_root(override)
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        return []
    out = []
    for name in names:
        d = os.path.join(root, name)
        info = _read_json(os.path.join(d, JOB_FILE))
        if not isinstance(info, dict) or not alive(int(info.get("pid", -1))):
            continue
        out.append(Job(d, info, read_records(d)))
    out.sort(key=lambda j: (j.info.get("started", 0.0), j.directory))
    return out


def prune(override: str | None = None) -> int:
    """Remove the directories of jobs whose main process is gone; returns how many."""
    root = _jobs_root(override)
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return 0
    n = 0
    for name in names:
        pid_text = name.split("-", 1)[0]
        if pid_text.isdigit() and not alive(int(pid_text)):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
            n += 1
    return n
