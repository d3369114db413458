"""botocore's parsed S3 models kept in the user's cache directory: written by the first process,
read (not parsed again) by the next, and a damaged file is replaced, never trusted. Each step
runs in a fresh interpreter against moto, with a request that needs the models."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

CODE = """
import asyncio, collections, json, sys
import astream.storage.s3sdk as s3m
from astream.storage import open_store

async def main():
    store = open_store(sys.argv[1], **json.loads(sys.argv[2]))
    try:
        await store.put("k", b"hello")
        assert await store.get_range("k", 1, 4) == b"ell"
        assert (await store.head("k")).size == 5
    finally:
        await store.aclose()

asyncio.run(main())
data, _ = s3m._loader._cache[("load_data_with_path", "s3/2006-03-01/service-2")]
print("FROM", "botocore" if isinstance(data, collections.OrderedDict) else "file")
print("PATH", s3m._models_file())
"""


def _run(url: str, opts: dict[str, Any], cache: Path) -> tuple[str, str]:
    import json

    env = dict(os.environ, PYTHONPATH=str(ROOT), XDG_CACHE_HOME=str(cache))
    p = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CODE), url, json.dumps(opts)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    lines = dict(line.split(" ", 1) for line in p.stdout.splitlines())
    return lines["FROM"], lines["PATH"]


def test_models_file_is_written_read_and_replaced_when_damaged(
    s3_bucket: str, s3_server: Any, tmp_path: Path
) -> None:
    url = f"{s3_bucket}/models-{uuid.uuid4().hex[:8]}"
    opts = {**s3_server.store_options(), "direct": False}  # every request through the SDK
    cache = tmp_path / "cache"
    came, path = _run(url, opts, cache)
    assert came == "botocore" and path.startswith(str(cache / "astream-sdk"))
    assert os.path.getsize(path) > 10**6
    written = Path(path).read_bytes()
    came, _ = _run(url, opts, cache)
    assert came == "file" and Path(path).read_bytes() == written  # read, not rewritten
    Path(path).write_bytes(written[: len(written) // 2])  # damaged: parsed by botocore again
    came, _ = _run(url, opts, cache)
    assert came == "botocore" and Path(path).read_bytes() == written
    came, _ = _run(url, opts, cache)
    assert came == "file"
