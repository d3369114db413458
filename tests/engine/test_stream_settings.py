"""Per-Stream download settings override the dataset's, for that stream only.

Real parts: the S3 emulator behind the fault proxy, real MDS shards, the real engine.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

import pytest

from astream import Stream, StreamingDataset
from astream.errors import IntegrityError, StorageTimeoutError, TransientStorageError
from astream.storage.sync import upload

from .conftest import labels, write_dataset


def _remote(s3_bucket: str, tmp_path: Any, name: str, n: int, **kw: Any) -> tuple[str, str]:
    src = str(tmp_path / f"src-{name}")
    write_dataset(src, n, **kw)
    url = f"{s3_bucket}/{name}-{uuid.uuid4().hex[:8]}"
    upload(src, url)
    return src, url


def _flip_last_byte(path: str) -> None:
    """Corrupt a sample's payload (the last string's last char): the shard still parses."""
    with open(path, "r+b") as f:
        f.seek(-1, 2)
        b = f.read(1)
        f.seek(-1, 2)
        f.write(bytes([b[0] ^ 0x01]))


def _path(url: str, name: str) -> str:
    """The request path of ``name`` under an s3:// ``url`` as the proxy sees it."""
    return "/" + url.removeprefix("s3://") + "/" + name


def test_download_retry_per_stream(
    s3_bucket: str, s3_server: Any, make_proxy: Any, tmp_path: Any
) -> None:
    _, url_a = _remote(s3_bucket, tmp_path, "ra", 60)
    _, url_b = _remote(s3_bucket, tmp_path, "rb", 60, seed=1)
    proxy = make_proxy(s3_server.url)
    opts = {"endpoint_url": proxy.url}

    def dataset(cache: str) -> StreamingDataset:
        return StreamingDataset(
            streams=[
                Stream(remote=url_a, local=str(tmp_path / cache / "a"), download_retry=0),
                Stream(remote=url_b, local=str(tmp_path / cache / "b")),  # the dataset's 4
            ],
            download_retry=4,
            batch_size=4,
            storage_options=opts,
        )

    # stream b inherits 4 retries: three faults in a row on its shard cost nothing
    ds = dataset("c1")
    shard_b = _path(url_b, "shard.00000.mds")
    proxy.reset_stats()
    proxy.plan("503", "500", "503", path=shard_b)
    got = list(ds)
    assert sorted(labels(got)) == sorted(list(range(60)) * 2)
    assert proxy.stats.requests[shard_b] == 4
    assert dict(proxy.stats.faults) == {"503": 2, "500": 1}

    # stream a has download_retry=0: its first transient fault is final
    ds = dataset("c2")
    shard_a = _path(url_a, "shard.00000.mds")
    proxy.reset_stats()
    proxy.plan("503", path=shard_a)
    with pytest.raises(TransientStorageError) as info:
        list(ds)
    assert url_a.split("://", 1)[1] in str(info.value)
    assert proxy.stats.requests[shard_a] == 1
    assert [s.download_retry for s in ds.catalog.sources] == [0, 4]


def test_download_timeout_per_stream(
    s3_bucket: str, s3_server: Any, make_proxy: Any, tmp_path: Any
) -> None:
    _, url = _remote(s3_bucket, tmp_path, "to", 10)
    proxy = make_proxy(s3_server.url, latency=1.0)
    opts = {"endpoint_url": proxy.url}
    # the index request of the stream with a 0.2 s timeout times out (after its one retry)...
    with pytest.raises(StorageTimeoutError):
        StreamingDataset(
            streams=[
                Stream(
                    remote=url, local=str(tmp_path / "x"), download_timeout=0.2, download_retry=1
                )
            ],
            batch_size=2,
            storage_options=opts,
        )
    # ...while the dataset's own 0.2 s does not apply to a stream that sets 30 s
    ds = StreamingDataset(
        streams=[Stream(remote=url, local=str(tmp_path / "y"), download_timeout=30)],
        download_timeout=0.2,
        download_retry=0,
        batch_size=2,
        storage_options=opts,
    )
    assert ds.catalog.sources[0].download_timeout == 30.0
    assert sorted(labels(ds)) == list(range(10))


def test_keep_zip_per_stream(s3_bucket: str, tmp_path: Any) -> None:
    _, url_a = _remote(s3_bucket, tmp_path, "za", 600, compression="zstd")
    _, url_b = _remote(s3_bucket, tmp_path, "zb", 600, compression="zstd", seed=1)

    def files(d: str) -> tuple[list[str], list[str]]:
        names = sorted(os.listdir(d))
        return [n for n in names if n.endswith(".mds")], [n for n in names if n.endswith(".zstd")]

    for dataset_keep, keep_a, keep_b in ((False, True, None), (True, None, False)):
        la = str(tmp_path / f"ka-{dataset_keep}")
        lb = str(tmp_path / f"kb-{dataset_keep}")
        ds = StreamingDataset(
            streams=[
                Stream(remote=url_a, local=la, keep_zip=keep_a),
                Stream(remote=url_b, local=lb, keep_zip=keep_b),
            ],
            keep_zip=dataset_keep,
            batch_size=4,
        )
        assert len(list(ds)) == 1200
        raw_a, zips_a = files(la)
        raw_b, zips_b = files(lb)
        assert len(raw_a) >= 2 and len(raw_b) >= 2
        # stream a keeps its compressed files, stream b does not, whatever the dataset says
        assert zips_a == [n + ".zstd" for n in raw_a]
        assert zips_b == []
        assert [s.keep_zip for s in ds.catalog.sources] == [True, False]


def test_validate_hash_per_stream_remote(s3_bucket: str, tmp_path: Any) -> None:
    srcs, urls = [], []
    for name in ("ha", "hb"):
        src = str(tmp_path / f"src-{name}")
        write_dataset(src, 40, hashes=["sha1"])
        shard = os.path.join(src, "shard.00000.mds")
        _flip_last_byte(shard)  # after the index was written: its sha1 no longer matches
        url = f"{s3_bucket}/{name}-{uuid.uuid4().hex[:8]}"
        upload(src, url)
        srcs.append(src)
        urls.append(url)

    def dataset(cache: str, algo_a: str | None, algo_b: str | None) -> StreamingDataset:
        return StreamingDataset(
            streams=[
                Stream(remote=urls[0], local=str(tmp_path / cache / "a"), validate_hash=algo_a),
                Stream(remote=urls[1], local=str(tmp_path / cache / "b"), validate_hash=algo_b),
            ],
            batch_size=4,
        )

    # no validation: the corrupt payloads pass unnoticed (a flipped text byte still parses)
    assert len(list(dataset("c0", None, None))) == 80
    for cache, algo_a, algo_b, bad in (("c1", "sha1", None, 0), ("c2", None, "sha1", 1)):
        with pytest.raises(IntegrityError, match=r"sha1 of s3://.*/shard\.00000\.mds is") as info:
            list(dataset(cache, algo_a, algo_b))
        assert urls[bad].split("://", 1)[1] in str(info.value)
        assert urls[1 - bad].split("://", 1)[1] not in str(info.value)


def test_validate_hash_per_stream_local(tmp_path: Any) -> None:
    """Local-only streams are checked by the shard opener: the stream that asks for sha1
    finds its corrupt shard; the other stream's identical corruption is not looked for."""
    dirs = []
    for name in ("la", "lb"):
        d = str(tmp_path / name)
        write_dataset(d, 40, hashes=["sha1"])
        _flip_last_byte(os.path.join(d, "shard.00000.mds"))
        dirs.append(d)
    ok = StreamingDataset(streams=[Stream(local=dirs[0]), Stream(local=dirs[1])], batch_size=4)
    assert len(list(ok)) == 80
    for k in (0, 1):
        streams = [
            Stream(local=d, validate_hash="sha1" if i == k else None) for i, d in enumerate(dirs)
        ]
        ds = StreamingDataset(streams=streams, batch_size=4)
        with pytest.raises(IntegrityError) as info:
            list(ds)
        assert os.path.join(dirs[k], "shard.00000.mds") in str(info.value)


def test_bad_stream_settings_fail_at_construction(tmp_path: Any) -> None:
    from astream.errors import ConfigError

    with pytest.raises(ConfigError, match=r"validate_hash: .*'bogus'"):
        Stream(local=str(tmp_path), validate_hash="bogus")
    with pytest.raises(ConfigError, match="download_retry must be >= 0"):
        Stream(local=str(tmp_path), download_retry=-1)
    with pytest.raises(ConfigError, match="download_timeout must be finite and > 0"):
        Stream(local=str(tmp_path), download_timeout=0)


def test_stream_hash_must_be_listed_by_its_shards(tmp_path: Any) -> None:
    from astream.errors import FormatError

    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    write_dataset(a, 20, hashes=["sha1"])
    write_dataset(b, 20)  # no hashes at all
    ds = StreamingDataset(
        streams=[Stream(local=a, validate_hash="sha1"), Stream(local=b)], batch_size=4
    )
    assert len(list(ds)) == 40
    with pytest.raises(FormatError, match=r"stream 1 validates shards with 'xxh64', but shard 0 "):
        StreamingDataset(
            streams=[Stream(local=a), Stream(local=b, validate_hash="xxh64")], batch_size=4
        )


def test_stream_hash_overrides_the_dataset_hash(tmp_path: Any) -> None:
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    write_dataset(a, 20, hashes=["sha1"])
    write_dataset(b, 20, hashes=["xxh64"])
    streams = [Stream(local=a), Stream(local=b, validate_hash="xxh64")]
    ds = StreamingDataset(streams=streams, validate_hash="sha1", batch_size=4)
    assert [s.validate_hash for s in ds.catalog.sources] == ["sha1", "xxh64"]
    assert [s.validate_hash for s in streams] == ["sha1", "xxh64"]
    assert len(list(ds)) == 40
