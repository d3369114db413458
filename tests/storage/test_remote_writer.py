"""MDSWriter writing straight to every cloud emulator; read back exactly after download."""

from __future__ import annotations

import os
from typing import Any

import pytest

from astream import LocalDataset, MDSWriter, merge_index
from astream.errors import ObjectNotFoundError
from astream.storage import sync
from astream.writer.remote import RemoteSink, make_sink

CLOUD_BUCKETS = {"s3": "s3_bucket", "gcs": "gcs_bucket", "azure": "azure_container"}
COLUMNS = {"id": "int", "text": "str", "blob": "bytes"}


def samples(n: int, base: int = 0) -> list[dict[str, Any]]:
    return [
        {"id": base + i, "text": f"sample {base + i} " * (i % 7), "blob": bytes([i % 251]) * i}
        for i in range(n)
    ]


@pytest.fixture(params=sorted(CLOUD_BUCKETS))
def cloud_url(request: pytest.FixtureRequest) -> str:
    bucket: str = request.getfixturevalue(CLOUD_BUCKETS[request.param])
    return f"{bucket}/ds-{request.node.name.split('[')[0][-20:]}-{os.urandom(4).hex()}"


def read_back(url: str, dest: str) -> list[dict[str, Any]]:
    sync.download(url, dest)
    ds = LocalDataset(dest)
    return [ds[i] for i in range(len(ds))]


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_writer_to_cloud_reads_back_exactly(
    cloud_url: str, tmp_path: Any, compression: str | None
) -> None:
    data = samples(300)
    sinks: list[RemoteSink] = []

    def factory(remote: str, local: str, keep_local: bool) -> RemoteSink:
        sinks.append(make_sink(remote, local, keep_local))
        return sinks[-1]

    with MDSWriter(
        out=cloud_url,
        columns=COLUMNS,
        compression=compression,
        size_limit=4096,
        hashes=["sha1"],
        sink_factory=factory,
    ) as w:
        for s in data:
            w.write(s)
    uploaded = sinks[0].uploaded
    assert uploaded[-1] == "index.json"  # the index only after every shard
    assert len(uploaded) > 5 and "index.json" not in uploaded[:-1]
    ext = ".mds.zstd" if compression else ".mds"
    assert all(k.endswith(ext) for k in uploaded[:-1])
    assert read_back(cloud_url, str(tmp_path / "back")) == data


def test_local_and_remote_keep_local(s3_bucket: str, tmp_path: Any) -> None:
    url = f"{s3_bucket}/keep-{os.urandom(4).hex()}"
    keep, drop = tmp_path / "keep", tmp_path / "drop"
    for local, keep_local in ((keep, True), (drop, False)):
        with MDSWriter(
            out=(str(local), url + ("-k" if keep_local else "-d")),
            columns=COLUMNS,
            size_limit=2048,
            keep_local=keep_local,
        ) as w:
            for s in samples(100):
                w.write(s)
    kept = sorted(os.listdir(keep))
    assert "index.json" in kept and len(kept) > 3
    assert not drop.exists() or sorted(os.listdir(drop)) == []
    assert read_back(url + "-d", str(tmp_path / "b1")) == samples(100)
    local_ds = LocalDataset(str(keep))
    assert [local_ds[i] for i in range(len(local_ds))] == samples(100)


def test_upload_failure_surfaces_as_original_error(s3_server: Any, tmp_path: Any) -> None:
    url = "s3://no-such-bucket-astream/ds"
    w = MDSWriter(out=(str(tmp_path / "l"), url), columns=COLUMNS, size_limit=1024)
    with pytest.raises(ObjectNotFoundError) as ei, w:
        for s in samples(200):
            w.write(s)
    assert "NoSuchBucket" in str(ei.value)
    assert ei.value.url is not None and ei.value.url.startswith("s3://no-such-bucket-astream/ds/")


def test_sink_index_not_uploaded_after_failure(s3_server: Any, tmp_path: Any) -> None:
    local = tmp_path / "x"
    local.mkdir()
    (local / "shard.00000.mds").write_bytes(b"abc")
    (local / "index.json").write_bytes(b"{}")
    sink = make_sink("s3://no-such-bucket-astream/y", str(local), True)
    try:
        sink.shard_done(str(local / "shard.00000.mds"), "shard.00000.mds")
        with pytest.raises(ObjectNotFoundError, match="NoSuchBucket"):
            sink.finish(str(local / "index.json"))
        with pytest.raises(ObjectNotFoundError):
            sink.check()
        assert sink.uploaded == []
    finally:
        sink.close()
        sink.close()


def test_merge_index_on_remote_subdatasets(s3_bucket: str, tmp_path: Any) -> None:
    root = f"{s3_bucket}/merged-{os.urandom(4).hex()}"
    for part in range(2):
        with MDSWriter(out=f"{root}/part{part}", columns=COLUMNS, size_limit=2048) as w:
            for s in samples(50, base=1000 * part):
                w.write(s)
    merge_index(root)
    assert read_back(root, str(tmp_path / "m")) == samples(50) + samples(50, base=1000)
