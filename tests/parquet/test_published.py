"""``index_source="published"``: the table is the files of the index ``astream index`` wrote
next to the data, the prefix is not listed. Request counts at the S3 proxy (cold: one HEAD and
one GET of the index; warm: one HEAD), a republished index is picked up, a file added after
publishing is not part of the table, a rewritten file fails its conditional read
(ObjectChangedError) and a removed one is an ObjectNotFoundError naming it, on moto and local."""

from __future__ import annotations

import os
import uuid
from typing import Any

import pyarrow.parquet as pq
import pytest

from astream import Stream, StreamingDataset
from astream.cli import main as cli
from astream.errors import ConfigError, ObjectChangedError, ObjectNotFoundError
from astream.storage.sync import upload, upload_key

from .conftest import write_table

LAYOUT = [(30, 7), (50, 16), (20, 20)]  # 100 rows, 5 + 4 + 1 row groups


def _labels(ds: StreamingDataset) -> list[int]:
    return [int(x["label"]) for x in ds]


def test_published_on_s3_request_counts_and_republish(
    tmp_path: Any, s3_bucket: str, s3_server: Any, make_proxy: Any, capsys: Any
) -> None:
    root = str(tmp_path / "t")
    write_table(root, LAYOUT)
    url = f"{s3_bucket}/pub-{uuid.uuid4().hex[:8]}"
    upload(root, url)
    proxy = make_proxy(s3_server.url)
    opts = {"endpoint_url": proxy.url}
    local = str(tmp_path / "c")

    def build(cache: str = local, **kw: Any) -> StreamingDataset:
        return StreamingDataset(
            streams=[Stream(remote=url, local=cache, format="parquet", **kw)],
            batch_size=4,
            storage_options=opts,
        )

    with pytest.raises(ConfigError, match=r"no published index .*astream index"):
        build(index_source="published")
    assert cli(["index", url]) == 0  # (the fixture points the CLI at moto)
    capsys.readouterr()
    proxy.reset_stats()
    ds = build(index_source="published")
    assert len(ds) == 100
    assert dict(proxy.stats.methods) == {"HEAD": 1, "GET": 1}  # no listing, no footer
    proxy.reset_stats()
    ds = build(index_source="published")
    assert dict(proxy.stats.methods) == {"HEAD": 1}  # warm: the cache made from that object
    assert _labels(ds) == list(range(100))
    # a file added after publishing is not in the table until the index is published again
    extra = str(tmp_path / "extra")
    write_table(extra, [(5, 5)], prefix="zz", start=100)
    upload(extra, url)
    assert len(build(index_source="published")) == 100
    assert len(build(str(tmp_path / "c3"))) == 105  # a listing sees it
    assert cli(["index", url]) == 0  # (the fixture points the CLI at moto)
    proxy.reset_stats()
    assert _labels(build(index_source="published")) == list(range(105))
    assert proxy.stats.methods["HEAD"] == 1 and proxy.stats.methods["GET"] >= 2  # index, data
    # a file rewritten in place: its conditional row-group read fails, naming it
    short = str(tmp_path / "short.parquet")
    pq.write_table(pq.read_table(os.path.join(root, "part-1.parquet")).slice(0, 9), short)
    upload_key(short, url, "part-1.parquet")
    ds = build(str(tmp_path / "c2"), index_source="published")  # no row group cached yet
    assert len(ds) == 105  # the definition is the published index: nothing listed or read
    with pytest.raises(ObjectChangedError, match=r"part-1\.parquet\]"):
        ds[40]
    assert int(ds[3]["label"]) == 3  # the unchanged files still read


def test_published_local_removed_file_and_refusals(tmp_path: Any, capsys: Any) -> None:
    root = str(tmp_path / "t")
    write_table(root, LAYOUT)
    assert cli(["index", root]) == 0
    capsys.readouterr()
    local = str(tmp_path / "c")

    def build(cache: str = local, **kw: Any) -> StreamingDataset:
        return StreamingDataset(remote=root, local=cache, format="parquet", batch_size=4, **kw)

    assert _labels(build(index_source="published")) == list(range(100))
    os.rename(os.path.join(root, "part-2.parquet"), str(tmp_path / "moved.parquet"))
    ds = build(str(tmp_path / "c2"), index_source="published")  # no row group cached yet
    assert len(ds) == 100 and int(ds[0]["label"]) == 0
    with pytest.raises(ObjectNotFoundError, match=r"part-2\.parquet"):
        ds[95]
    with pytest.raises(ConfigError, match="index_source is for format='parquet'"):
        Stream(remote=root, index_source="published")
    with pytest.raises(ConfigError, match="the published index defines the files"):
        Stream(remote=root, format="parquet", files=["a.parquet"], index_source="published")
    with pytest.raises(ConfigError, match="index_source must be 'list', 'published' or None"):
        Stream(remote=root, format="parquet", index_source="cached")
    assert Stream(remote=root, format="parquet", index_source="list").index_source is None
