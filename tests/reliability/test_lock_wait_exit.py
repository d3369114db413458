"""A process waiting for a cache lock another process holds must still exit at once when it is
interrupted: the waiting thread sleeps in ``flock(2)``, and a thread the interpreter joins at
exit (as a ``ThreadPoolExecutor``'s are) kept the process alive until the holder let go.

Seen as a fresh-clone CI failure: Ctrl-C (SIGINT to the process group) of a job with 2 DataLoader
workers took over 15 s to end (tests/reliability/test_crashes.py::
test_sigint_stops_promptly_and_leaves_nothing[2]): each worker can be waiting, in such a thread,
for a shard lock the other one holds while both exit."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from typing import Any

from astream.runtime.locks import FileLock

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_WAITER = textwrap.dedent(
    """
    import asyncio, sys
    from astream.runtime.locks import FileLock

    async def main() -> None:
        lock = FileLock(sys.argv[1])
        task = asyncio.ensure_future(lock.exclusive_async())
        await asyncio.sleep(0.3)
        print("WAITING", flush=True)
        await asyncio.sleep(0.3)
        task.cancel()  # interrupted while its thread still sleeps in flock

    asyncio.run(main())
    print("LEFT", flush=True)
    """
)


def test_a_process_waiting_for_a_held_lock_exits_at_once(tmp_path: Any) -> None:
    path = str(tmp_path / "shard.lock")
    held = FileLock(path)
    held.exclusive()  # this process holds it for the whole test
    try:
        p = subprocess.Popen(
            [sys.executable, "-c", _WAITER, path],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert p.stdout is not None
        assert p.stdout.readline().strip() == "WAITING"  # the fault: its thread waits in flock
        t0 = time.monotonic()
        rc = p.wait(timeout=30)
        took = time.monotonic() - t0
        assert p.stdout.readline().strip() == "LEFT"
        assert rc == 0 and took < 5, took
    finally:
        if p.poll() is None:
            p.kill()
        held.release()
