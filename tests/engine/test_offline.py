"""A warm cache works offline (issue 11, item 10).

When the remote index cannot be read -- the endpoint is down, the bucket is gone -- but
``local`` holds a complete copy of that remote's dataset (bound to it, the index the binding
names, every shard at its full size), the dataset streams from the cache with one warning
naming the reason. Anything less than that still raises the storage error; and a reachable
remote with another index still wins. Against the real S3 emulator (moto), stopped or emptied.
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
import warnings
from typing import Any

import numpy as np
import pytest

from astream import StreamingDataset
from astream.errors import ObjectNotFoundError, StorageError, TransientStorageError
from astream.runtime.binding import index_digest, read_binding
from astream.storage.sync import upload
from astream.testing import MotoServer

from .conftest import labels, write_dataset

WARNING = (
    r"the index of {url} cannot be read \((?P<why>.+)\); streaming the complete cached copy in "
    r"{local} \((?P<n>\d+) shards, bound to that remote\)"
)


def _offline_warnings(record: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in record if "cannot be read" in str(w.message)]


def _check(ds: StreamingDataset, samples: list[dict[str, Any]]) -> None:
    got = list(ds)
    assert sorted(labels(got)) == list(range(len(samples)))
    for s in got:
        assert np.array_equal(s["ids"], samples[s["label"]]["ids"])


def test_warm_cache_streams_when_the_endpoint_is_down(tmp_path: Any) -> None:
    src = str(tmp_path / "src")
    samples = write_dataset(src, 300)
    server = MotoServer().start()
    try:
        server.create_bucket("offline")
        url = f"s3://offline/ds-{uuid.uuid4().hex[:8]}"
        opts = server.store_options()
        upload(src, url, **opts)
        local = str(tmp_path / "cache")
        kw: dict[str, Any] = dict(
            remote=url, local=local, batch_size=10, storage_options=opts, download_retry=1
        )
        ds = StreamingDataset(**kw)
        _check(ds, samples)
        n = len(ds.shards)
    finally:
        server.stop()

    # a shard missing, or one cut short: not a complete copy -> the storage error, no warning
    shard = os.path.join(local, ds.shards[1].raw_data.basename)
    shutil.copy(shard, str(tmp_path / "aside"))
    for damage in (os.unlink, lambda p: os.truncate(p, 100)):
        shutil.copy(str(tmp_path / "aside"), shard)
        damage(shard)
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            with pytest.raises(TransientStorageError, match=r"index\.json"):
                StreamingDataset(**kw)
        assert _offline_warnings(rec) == []
    shutil.copy(str(tmp_path / "aside"), shard)

    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        ds2 = StreamingDataset(**kw)
    [msg] = _offline_warnings(rec)
    m = re.fullmatch(WARNING.format(url=re.escape(url), local=re.escape(local)), msg)
    assert m and int(m["n"]) == n and f"{url}/index.json" in m["why"], msg
    _check(ds2, samples)
    assert ds2[123]["label"] == 123 and ds2.stats.bytes_fetched == 0


def _delete_bucket(endpoint: str, bucket: str) -> None:
    """Empty and delete the bucket (boto3 against the emulator, fake credentials)."""
    import boto3

    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    for obj in s3.list_objects_v2(Bucket=bucket).get("Contents", []):
        s3.delete_object(Bucket=bucket, Key=obj["Key"])
    s3.delete_bucket(Bucket=bucket)


def test_bucket_gone_then_back_with_another_dataset(tmp_path: Any, s3_server: Any) -> None:
    bucket = f"gone-{uuid.uuid4().hex[:8]}"
    s3_server.create_bucket(bucket)
    url = f"s3://{bucket}/ds"
    a = str(tmp_path / "a")
    samples_a = write_dataset(a, 200, seed=1, hashes=["xxh64"])
    upload(a, url)
    local = str(tmp_path / "cache")
    _check(StreamingDataset(remote=url, local=local, batch_size=10), samples_a)

    _delete_bucket(s3_server.url, bucket)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        ds = StreamingDataset(remote=url, local=local, batch_size=10)
    [msg] = _offline_warnings(rec)
    m = re.fullmatch(WARNING.format(url=re.escape(url), local=re.escape(local)), msg)
    assert m, msg
    with pytest.raises(ObjectNotFoundError) as gone:  # the reason is the store's own error
        StreamingDataset(remote=url, local=str(tmp_path / "cold"), batch_size=10)
    assert m["why"] == str(gone.value)
    _check(ds, samples_a)

    # the bucket is back with another dataset at the same URL: the reachable index wins
    s3_server.create_bucket(bucket)
    b = str(tmp_path / "b")
    samples_b = write_dataset(b, 260, seed=2, hashes=["xxh64"])
    upload(b, url)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        ds_b = StreamingDataset(remote=url, local=local, batch_size=10)
    assert _offline_warnings(rec) == []
    _check(ds_b, samples_b)
    with open(os.path.join(b, "index.json"), "rb") as f:
        assert read_binding(local).digest == index_digest(f.read())


def test_cold_cache_and_no_remote_is_the_storage_error(tmp_path: Any, s3_bucket: str) -> None:
    with pytest.raises(StorageError) as e:
        StreamingDataset(
            remote=f"{s3_bucket}/never-{uuid.uuid4().hex[:6]}",
            local=str(tmp_path / "c"),
            batch_size=10,
        )
    assert isinstance(e.value, ObjectNotFoundError) and "index.json" in str(e.value)
