"""Files and directories the cache creates follow the process umask, as the writers' do: data
files 0666 and directories 0777 less the umask, and so are its lock, lease and clock files, so
that under a group umask (002) another member of the group can open them read-write and share
the cache. Checked for an MDS dataset read with a ``cache_limit`` (locks, pins, leases, the
node clock), a Parquet row group large enough to be decoded into a shared Arrow file, and a
multi-part download (``astream.storage.transfer``)."""

from __future__ import annotations

import asyncio
import os
import stat
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from astream import MDSWriter, StreamingDataset
from astream.storage import open_store
from astream.storage.transfer import download_file


def modes(root: str) -> dict[str, str]:
    """Relative path -> octal mode of every file and directory under ``root`` (symbolic links
    and what is gone since listed: skipped)."""
    out = {}
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(d, n)
            try:
                st = os.lstat(p)
            except FileNotFoundError:
                continue
            if not stat.S_ISLNK(st.st_mode):  # a link's own mode means nothing
                out[os.path.relpath(p, root)] = oct(stat.S_IMODE(st.st_mode))
    return out


def want(root: str, umask: int) -> dict[str, str]:
    return {
        rel: oct((0o777 if os.path.isdir(os.path.join(root, rel)) else 0o666) & ~umask)
        for rel in modes(root)
    }


def test_mds_cache_with_a_limit(tmp_path: Any, umask: int) -> None:
    src, cache = str(tmp_path / "src"), str(tmp_path / "cache")
    with MDSWriter(out=src, columns={"id": "int", "b": "bytes"}, size_limit=2000,
                   compression="zstd") as w:  # fmt: skip
        for i in range(120):
            w.write({"id": i, "b": bytes([i]) * 90})
    ds = StreamingDataset(remote=f"file://{src}", local=cache, batch_size=10, cache_limit=10**6)
    assert sorted(int(s["id"]) for s in ds) == list(range(120))
    assert int(ds[77]["id"]) == 77
    got = modes(cache)
    names = {os.path.basename(p) for p in got}
    assert "cache.lock" in names and any(n.endswith(".mds") for n in names)
    assert any(n.startswith("clock-") for n in names) and "leases" in names
    assert got == want(cache, umask)


def test_parquet_decoded_file(tmp_path: Any, umask: int) -> None:
    src, cache = str(tmp_path / "src"), str(tmp_path / "cache")
    os.makedirs(src)
    vals = np.random.default_rng(1).integers(0, 2**62, size=(6000, 4)).tolist()
    pq.write_table(pa.table({"tok": pa.array(vals, pa.list_(pa.int64()))}),
                   os.path.join(src, "a.parquet"), row_group_size=3000)  # fmt: skip
    ds = StreamingDataset(remote=src, local=cache, format="parquet", batch_size=10)
    assert sum(1 for _ in ds) == 6000
    got = modes(cache)
    assert len([p for p in got if p.endswith(".arrow")]) == 2
    assert got == want(cache, umask)


def test_multipart_download(tmp_path: Any, umask: int) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "big.bin").write_bytes(os.urandom(300_000))
    dest = str(tmp_path / "dl" / "big.bin")

    async def go() -> int:
        store = open_store(str(src))
        try:
            return await download_file(store, "big.bin", dest, part_size=64 << 10)
        finally:
            await store.aclose()

    assert asyncio.run(go()) == 300_000
    assert modes(str(tmp_path / "dl")) == want(str(tmp_path / "dl"), umask)
