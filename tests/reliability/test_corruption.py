"""Issue 7.3: corrupt bytes are detected, re-fetched once, then raised; truncation is caught by
structure even without hashes; and what cannot be detected without hashes is pinned down."""

from __future__ import annotations

import os
import shutil
import uuid
from typing import Any

import pytest

from astream import LocalDataset, StreamingDataset
from astream.errors import FormatError, IntegrityError
from astream.storage.sync import upload

from .conftest import MakeProxy, check_samples, shard_names, write_ds


def flip(path: str, where: int) -> None:
    """XOR one byte at ``where`` (negative: from the end)."""
    with open(path, "r+b") as f:
        f.seek(where, 0 if where >= 0 else 2)
        pos = f.tell()
        b = f.read(1)
        f.seek(pos)
        f.write(bytes([b[0] ^ 0x5A]))


def shard_gets(proxy: Any, name: str) -> int:
    return sum(n for p, n in proxy.stats.requests.items() if p.endswith("/" + name))


def _ds(url: str, local: str, proxy: Any, **kw: Any) -> StreamingDataset:
    opts = {"endpoint_url": proxy.url}
    return StreamingDataset(remote=url, local=local, batch_size=4, storage_options=opts, **kw)


@pytest.mark.parametrize("where", [-10, 9])  # a payload byte; a header (offset) byte
def test_flipped_cached_shard_is_refetched_with_validate_hash(
    s3_plain: str, s3_server: Any, make_proxy: MakeProxy, tmp_path: Any, where: int
) -> None:
    proxy = make_proxy(s3_server.url)
    local = str(tmp_path / "c")
    check_samples(list(_ds(s3_plain, local, proxy)), range(1200))
    victim = shard_names(local)[3]
    flip(os.path.join(local, victim), where)
    proxy.reset_stats()
    got = list(_ds(s3_plain, local, proxy, validate_hash="xxh64"))
    check_samples(got, range(1200))
    assert shard_gets(proxy, victim) == 1  # detected, fetched again once
    assert sum(shard_gets(proxy, n) for n in shard_names(local)) == 1  # nothing else


def test_cached_and_remote_both_corrupt_raise_integrity_error(
    s3_bucket: str, s3_server: Any, make_proxy: MakeProxy, tmp_path: Any
) -> None:
    src = write_ds(str(tmp_path / "src"), 300, hashes=["sha256"])
    victim = shard_names(src)[1]
    url = f"{s3_bucket}/bad-{uuid.uuid4().hex[:8]}"
    upload(src, url)
    proxy = make_proxy(s3_server.url)
    local = str(tmp_path / "c")
    check_samples(list(_ds(url, local, proxy)), range(300))  # cached, without validation
    flip(os.path.join(src, victim), -5)
    upload(src, url)  # the remote copy is now corrupt too (index unchanged)
    flip(os.path.join(local, victim), -5)
    proxy.reset_stats()
    msg = (
        rf"sha256 of s3://.*/{victim} is [0-9a-f]{{64}}, index says [0-9a-f]{{64}} "
        r"\(after one re-fetch\)"
    )
    with pytest.raises(IntegrityError, match=msg):
        list(_ds(url, local, proxy, validate_hash="sha256"))
    assert shard_gets(proxy, victim) == 2  # fetched, mismatched, fetched once more
    assert not os.path.exists(os.path.join(local, victim))
    assert not [n for n in os.listdir(local) if ".tmp-" in n]


def test_corrupt_local_only_shard_is_never_deleted(tmp_path: Any) -> None:
    src = write_ds(str(tmp_path / "src"), 300, hashes=["xxh64"])
    victim = os.path.join(src, shard_names(src)[0])
    flip(victim, -7)
    size = os.path.getsize(victim)
    ds = StreamingDataset(local=src, batch_size=8, validate_hash="xxh64")
    with pytest.raises(
        IntegrityError, match=rf"xxh64 of the cached shard {victim} is [0-9a-f]{{16}}, index says"
    ):
        list(ds)
    assert os.path.getsize(victim) == size  # the only copy: reported, never deleted


def test_truncated_cached_shard_is_refetched_without_hashes(
    s3_plain: str, s3_server: Any, make_proxy: MakeProxy, tmp_path: Any
) -> None:
    proxy = make_proxy(s3_server.url)
    local = str(tmp_path / "c")
    check_samples(list(_ds(s3_plain, local, proxy)), range(1200))
    victim = shard_names(local)[2]
    with open(os.path.join(local, victim), "r+b") as f:
        f.truncate(os.path.getsize(os.path.join(local, victim)) // 2)
    proxy.reset_stats()
    check_samples(list(_ds(s3_plain, local, proxy)), range(1200))  # no validate_hash
    assert shard_gets(proxy, victim) == 1


def test_truncated_local_only_shard_is_a_format_error(tmp_path: Any) -> None:
    src = write_ds(str(tmp_path / "src"), 300)
    victim = os.path.join(src, shard_names(src)[0])
    full = os.path.getsize(victim)
    with open(victim, "r+b") as f:
        f.truncate(full - 100)
    with pytest.raises(
        FormatError, match=rf"{victim}: shard is {full - 100} bytes, index says {full}"
    ):
        list(StreamingDataset(local=src, batch_size=8))
    with pytest.raises(
        FormatError,
        match=rf"{victim}: shard is {full - 100} bytes, index says {full} \(truncated\)",
    ):
        LocalDataset(src)[0]


def test_header_corruption_without_hashes_is_a_format_error(tmp_path: Any) -> None:
    src = write_ds(str(tmp_path / "src"), 300)
    victim = os.path.join(src, shard_names(src)[0])
    flip(victim, 6)  # inside offsets[0]: the first sample would start inside the header
    with pytest.raises(FormatError, match=rf"{victim}: "):
        list(StreamingDataset(local=src, batch_size=8))


def test_payload_flip_without_hashes_is_not_detectable(tmp_path: Any) -> None:
    """The honest limit: a same-size cached shard whose *payload* bytes changed, read without
    ``validate_hash``, parses fine and serves the changed bytes. Only hashes catch this."""
    src = write_ds(str(tmp_path / "src"), 300, hashes=["xxh64"])
    local = str(tmp_path / "copy")
    shutil.copytree(src, local)
    flip(os.path.join(local, shard_names(local)[0]), -12)  # data; the last 8 bytes are the id
    got = list(StreamingDataset(local=local, batch_size=4))
    with pytest.raises(AssertionError, match="wrong bytes"):
        check_samples(got, range(300))
    with pytest.raises(IntegrityError):
        list(StreamingDataset(local=local, batch_size=4, validate_hash="xxh64"))
