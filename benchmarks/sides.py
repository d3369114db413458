"""One benchmark side run in its own process, and the ``RESULT {json}`` line it prints.

A side prints ``RESULT `` followed by a JSON object with at least ``status`` (``"ok"`` or
``"error"``) on stdout; :func:`side_result` runs it and returns that object with the side's
stderr (for the caller to keep or log), or an ``error`` status naming why there is none: the
timeout, or the exit code and the end of stderr.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def side_result(cmd: list[str], env: dict[str, str], timeout: float) -> tuple[dict[str, Any], str]:
    try:
        p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"status": "error", "reason": f"timeout after {timeout:.0f} s"}, ""
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("RESULT "):
            r: dict[str, Any] = json.loads(line[len("RESULT ") :])
            return r, p.stderr
    return {"status": "error", "reason": f"exit {p.returncode}: {p.stderr[-500:]}"}, p.stderr
