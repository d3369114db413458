"""What the writers leave on a local disk: modes a team can read, and nothing half-written.

- Files and directories the writers (MDS, CSV, ``merge_index``) and the local store create
  follow the process umask (0644/0755 under umask 022), still written to a temporary name
  and renamed into place.
- A full disk (a real 256 KiB tmpfs, skipped where it cannot be mounted), an exceeded quota or
  a refused write (through ``astream.writer.output._write_all``, the one function every writer
  byte goes through) is an ``AstreamError`` naming the path and the bytes the write needed,
  from ``MDSWriter``, the XSV writers and ``astream convert``; no temporary file stays, and no
  ``index.json`` is written (or uploaded) naming a partial shard.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import re
import stat
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from astream import LocalDataset, MDSWriter, merge_index
from astream.cli import main as cli_main
from astream.errors import AccessDeniedError, AstreamError, StorageError
from astream.storage import open_store
from astream.writer import output
from astream.writer.xsv import CSVWriter

COLUMNS = {"id": "int", "text": "str", "blob": "bytes"}


def rows(n: int) -> list[dict[str, Any]]:
    return [{"id": i, "text": f"row {i} " * 5, "blob": os.urandom(900)} for i in range(n)]


def csv_rows(n: int) -> list[dict[str, Any]]:
    return [{"id": i, "text": "x" * 900} for i in range(n)]


def mode(path: str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_writer_files_follow_the_umask(tmp_path: Any, umask: int) -> None:
    want_file, want_dir = 0o666 & ~umask, 0o777 & ~umask
    out = str(tmp_path / "ds" / "part0")
    with MDSWriter(out=out, columns=COLUMNS, size_limit=4096, compression="zstd") as w:
        for r in rows(20):
            w.write(r)
    with CSVWriter(out=str(tmp_path / "ds" / "part1"), columns={"id": "int", "text": "str"}) as c:
        for r in csv_rows(5):
            c.write(r)
    merge_index(str(tmp_path / "ds"))
    made = []
    for root, dirs, files in os.walk(tmp_path / "ds"):
        made += [(os.path.join(root, d), want_dir) for d in dirs]
        made += [(os.path.join(root, f), want_file) for f in files]
    assert len(made) > 8 and any(p.endswith(".mds.zstd") for p, _ in made)
    assert {p: oct(mode(p)) for p, _ in made} == {p: oct(m) for p, m in made}
    assert mode(str(tmp_path / "ds")) == want_dir
    assert len(LocalDataset(str(tmp_path / "ds"))) == 25


def test_local_store_files_follow_the_umask(tmp_path: Any, umask: int) -> None:
    src = tmp_path / "src.bin"
    src.write_bytes(b"abc")

    async def go() -> None:
        store = open_store(str(tmp_path / "store"))
        try:
            await store.put("a/b/put.bin", b"x")
            await store.put_file("a/file.bin", str(src))
            await store.put_if("a/new.bin", b"y")
            await store.put_file_if("c/new.bin", str(src))
        finally:
            await store.aclose()

    asyncio.run(go())
    root = tmp_path / "store"
    for rel in ("a/b/put.bin", "a/file.bin", "a/new.bin", "c/new.bin"):
        assert mode(str(root / rel)) == 0o666 & ~umask, rel
    for rel in ("a", "a/b", "c"):
        assert mode(str(root / rel)) == 0o777 & ~umask, rel
    assert not [n for _, _, fs in os.walk(root) for n in fs if "tmp" in n]


# -- a full disk, for real ----------------------------------------------------------------------


@pytest.fixture
def small_disk(tmpfs: Callable[[int], str]) -> str:
    return tmpfs(256)


NEED = re.compile(r"cannot write (\S+): (.+?) \((\d+) bytes needed(?:, (\d+) bytes free there)?\)")


def assert_nothing_half_written(out: str, shards: list[Any]) -> None:
    """No index.json, no temporary file; every shard file there is a whole, listed shard."""
    names = sorted(os.listdir(out))
    assert "index.json" not in names
    assert not [n for n in names if n.startswith(".") or n.endswith(".tmp")], names
    whole = {e.raw_data.basename: e.raw_data.bytes for e in shards}
    for e in shards:
        for info in (e.raw_data, e.raw_meta):
            if info is not None:
                whole[info.basename] = info.bytes
    assert names == sorted(whole)
    for n, size in whole.items():
        assert os.path.getsize(os.path.join(out, n)) == size


def check_full(err: BaseException, out: str) -> tuple[str, int]:
    assert isinstance(err, StorageError) and not isinstance(err, AccessDeniedError)
    assert isinstance(err.__cause__, OSError) and err.__cause__.errno == errno.ENOSPC
    m = NEED.search(str(err))
    assert m, str(err)
    path, what, need = m[1], m[2], int(m[3])
    assert what == "no space left on device" and os.path.dirname(path) == out
    assert err.url == path and m[4] is not None and int(m[4]) < need
    return path, need


def test_mds_writer_on_a_full_disk(small_disk: str) -> None:
    out = os.path.join(small_disk, "ds")
    w = MDSWriter(out=out, columns=COLUMNS, size_limit=60_000)
    with pytest.raises(AstreamError) as ei, w:
        for r in rows(400):
            w.write(r)
    path, need = check_full(ei.value, out)
    assert re.fullmatch(r"shard\.\d{5}\.mds", os.path.basename(path))
    assert 40_000 < need <= 60_000  # the shard it was writing
    assert len(w.shards) >= 2
    assert_nothing_half_written(out, w.shards)


def test_csv_writer_on_a_full_disk(small_disk: str) -> None:
    out = os.path.join(small_disk, "csv")
    w = CSVWriter(out=out, columns={"id": "int", "text": "str"}, size_limit=50_000)
    with pytest.raises(AstreamError) as ei, w:
        for r in csv_rows(400):
            w.write(r)
    path, _ = check_full(ei.value, out)
    assert re.fullmatch(r"shard\.\d{5}\.csv(\.meta)?", os.path.basename(path))
    assert_nothing_half_written(out, w.shards)


def test_convert_on_a_full_disk(
    small_disk: str, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"id": i, "t": "z" * 1000}) + "\n" for i in range(400)))
    out = os.path.join(small_disk, "conv")
    assert cli_main(["convert", str(src), out, "--size-limit", "50kb"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("astream: error: cannot write ") and err.count("\n") == 1
    m = NEED.search(err)
    assert m and m[2] == "no space left on device" and os.path.dirname(m[1]) == out, err
    names = os.listdir(out)
    assert "index.json" not in names and not [n for n in names if n.startswith(".")]
    assert all(os.path.getsize(os.path.join(out, n)) <= 50 * 1024 for n in names)


# -- quota and permission, through the write seam ------------------------------------------------


def failing_at(monkeypatch: pytest.MonkeyPatch, code: int, when: Callable[[int], bool]) -> None:
    """Make the n-th file any writer writes (0-based) fail with ``code`` where ``when(n)``."""
    real = output._write_all
    count = [0]

    def write_all(fd: int, data: bytes) -> None:
        n = count[0]
        count[0] += 1
        if when(n):
            raise OSError(code, os.strerror(code))
        real(fd, data)

    monkeypatch.setattr(output, "_write_all", write_all)


@pytest.mark.parametrize(
    ("code", "kind", "text"),
    [
        (errno.EDQUOT, StorageError, "disk quota exceeded"),
        (errno.ENOSPC, StorageError, "no space left on device"),
        (errno.EACCES, AccessDeniedError, "permission denied"),
    ],
)
def test_write_errors_name_the_path_and_the_bytes(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, code: int, kind: type, text: str
) -> None:
    failing_at(monkeypatch, code, lambda n: n == 2)
    out = str(tmp_path / "ds")
    w = MDSWriter(out=out, columns=COLUMNS, size_limit=8192)
    with pytest.raises(kind) as ei, w:
        for r in rows(100):
            w.write(r)
    m = NEED.search(str(ei.value))
    assert m and m[1] == os.path.join(out, "shard.00002.mds") and m[2] == text, str(ei.value)
    assert 4096 < int(m[3]) <= 8192  # the shard's size
    assert ei.value.__cause__.errno == code  # type: ignore[union-attr]
    assert_nothing_half_written(out, w.shards)
    if code == errno.EACCES:
        assert isinstance(ei.value, PermissionError)


def test_index_write_failure_publishes_nothing(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = str(tmp_path / "ds")
    real = output.write_atomic

    def refuse_index(path: str, data: bytes) -> None:
        if path.endswith("index.json"):
            failing_at(monkeypatch, errno.ENOSPC, lambda n: True)
        real(path, data)

    monkeypatch.setattr("astream.writer.mds.write_atomic", refuse_index)
    w = MDSWriter(out=out, columns=COLUMNS, size_limit=8192)
    with pytest.raises(StorageError, match=r"cannot write .*index\.json: no space left"), w:
        for r in rows(30):
            w.write(r)
    assert_nothing_half_written(out, w.shards)


def test_xsv_quota_error(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    failing_at(monkeypatch, errno.EDQUOT, lambda n: n == 3)  # shard 1's meta file
    out = str(tmp_path / "csv")
    w = CSVWriter(out=out, columns={"id": "int", "text": "str"}, size_limit=5000)
    with pytest.raises(StorageError, match=r"shard\.00001\.csv\.meta: disk quota exceeded"), w:
        for r in csv_rows(30):
            w.write(r)
    names = sorted(os.listdir(out))
    assert names == ["shard.00000.csv", "shard.00000.csv.meta", "shard.00001.csv"]


def test_disk_error_of_a_remote_writer_uploads_no_index(
    s3_bucket: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"{s3_bucket}/diskfull-{uuid.uuid4().hex[:8]}"
    failing_at(monkeypatch, errno.ENOSPC, lambda n: n == 3)
    w = MDSWriter(out=url, columns=COLUMNS, size_limit=8192)
    with pytest.raises(StorageError, match="no space left on device"), w:
        for r in rows(100):
            w.write(r)

    async def keys() -> list[str]:
        store = open_store(url)
        try:
            return sorted([o.key async for o in store.list()])
        finally:
            await store.aclose()

    got = asyncio.run(keys())
    assert "index.json" not in got and len(got) <= 3
