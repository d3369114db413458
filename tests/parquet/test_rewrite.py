"""A Parquet file rewritten *after* the dataset was built (a job running): every ranged GET of a
row group is conditional on the indexed ETag/generation, so reading it is an
``ObjectChangedError`` naming the file, never retried and never bytes of the new object."""

from __future__ import annotations

import os
import re
import shutil
import uuid
from typing import Any

import pytest

from astream import Stream, StreamingDataset
from astream.errors import ObjectChangedError
from astream.storage.sync import upload, upload_key

REWRITTEN = "part-1.parquet"  # 50 rows in 4 row groups (labels 30-79)


def _same_size_rewrite(root: str, out: str) -> str:
    """``REWRITTEN`` with one byte of its first data page changed: same size, other bytes."""
    with open(os.path.join(root, REWRITTEN), "rb") as f:
        data = bytearray(f.read())
    data[4] ^= 0xFF
    path = os.path.join(out, REWRITTEN)
    with open(path, "wb") as f:
        f.write(bytes(data))
    return path


@pytest.mark.parametrize("backend", ["s3", "gcs", "azure", "local", "http"])
def test_rewrite_while_running_is_a_typed_error(
    backend: str, pq_table: Any, fresh: Any, tmp_path: Any, request: pytest.FixtureRequest
) -> None:
    root, _ = pq_table
    files = None
    if backend == "local":
        url = str(tmp_path / "remote")
        shutil.copytree(root, url)
    elif backend == "http":  # served from a directory: rewritten there
        sub = f"rw-{uuid.uuid4().hex[:8]}"
        shutil.copytree(root, os.path.join(request.getfixturevalue("http_root"), sub))
        url = f"{request.getfixturevalue('http_server').url}/{sub}"
        files = sorted(n for n in os.listdir(root) if n.endswith(".parquet"))
    else:
        bucket = request.getfixturevalue(
            {"s3": "s3_bucket", "gcs": "gcs_bucket", "azure": "azure_container"}[backend]
        )
        url = f"{bucket}/rw-{uuid.uuid4().hex[:8]}"
        upload(root, url)
    local = fresh()
    ds = StreamingDataset(
        streams=[
            Stream(remote=url, local=local, format="parquet", columns=["label", "tok"], files=files)
        ],
        batch_size=8,
    )
    new = _same_size_rewrite(root, str(tmp_path))
    if backend in ("local", "http"):
        path = os.path.join(url, REWRITTEN)
        if backend == "http":
            path = os.path.join(request.getfixturevalue("http_root"), sub, REWRITTEN)
        st = os.stat(path)
        shutil.copyfile(new, path)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    else:
        upload_key(new, url, REWRITTEN)
    labels: list[int] = []
    with pytest.raises(ObjectChangedError, match="changed since the index was built") as ei:
        for s in ds:
            labels.append(s["label"])
    assert ei.value.url is not None and ei.value.url.endswith("/" + REWRITTEN)
    assert not ei.value.retryable
    assert not any(30 <= x < 80 for x in labels)  # not one row of the rewritten file
    # no row group of the rewritten file was published in the cache (temporaries of fetches
    # cut short by the error may remain)
    done = re.compile(re.escape(REWRITTEN) + r"\.rg\d{5}\.[0-9a-f]+$")
    assert [n for _, _, ns in os.walk(local) for n in ns if done.match(n)] == []


def test_failed_condition_is_not_retried(
    pq_table: Any, s3_bucket: str, s3_server: Any, make_proxy: Any, fresh: Any, tmp_path: Any
) -> None:
    """At the proxy: each conditional GET of the rewritten file is sent once (no retry)."""
    root, _ = pq_table
    url = f"{s3_bucket}/rw-{uuid.uuid4().hex[:8]}"
    upload(root, url)
    proxy = make_proxy(s3_server.url)
    ds = StreamingDataset(
        streams=[Stream(remote=url, local=fresh(), format="parquet", columns=["label"])],
        batch_size=8,
        storage_options={"endpoint_url": proxy.url},
    )
    upload_key(_same_size_rewrite(root, str(tmp_path)), url, REWRITTEN)
    proxy.reset_stats()
    with pytest.raises(ObjectChangedError):
        ds[35]  # row 5 of the rewritten file: its first row group
    gets = [r for r in proxy.stats.ranges if r[0].endswith("/" + REWRITTEN)]
    assert len(gets) == 1, gets
