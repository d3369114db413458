"""A dataset whose remote path holds characters that URL encodings change ('+', '%41', a space,
'&', a non-ASCII letter) is written and read whole, byte for byte, on S3 (signed by astream, and
through the SDK) and from a local directory."""

from __future__ import annotations

import os
from typing import Any

import pytest

from astream import MDSWriter, StreamingDataset

ODD = "my data+v1 %41 \u00e9&"


def _write(out: str, n: int) -> None:
    with MDSWriter(out=out, columns={"id": "int", "text": "str"}, size_limit=1 << 12) as w:
        for i in range(n):
            w.write({"id": i, "text": f"sample {i} " * (i % 7 + 1)})


def _ids(ds: StreamingDataset) -> list[int]:
    return sorted(int(s["id"]) for s in ds)


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "sdk"])
def test_an_s3_remote_with_odd_characters(s3_bucket: str, tmp_path: Any, direct: bool) -> None:
    remote = f"{s3_bucket}/{ODD}/{'d' if direct else 's'}"
    _write(remote, 300)
    local = str(tmp_path / "cache")
    ds = StreamingDataset(
        remote=remote, local=local, batch_size=10, storage_options={"direct": direct}
    )
    assert len(ds.shards) >= 4  # several shards, each fetched under the odd prefix
    texts = {int(s["id"]): s["text"] for s in ds}
    assert texts == {i: f"sample {i} " * (i % 7 + 1) for i in range(300)}
    for shard in ds.shards:
        raw = shard.raw_data
        assert os.path.getsize(os.path.join(local, raw.basename)) == raw.bytes


def test_a_local_remote_with_odd_characters(tmp_path: Any) -> None:
    remote = str(tmp_path / ODD)
    _write(remote, 120)
    assert _ids(StreamingDataset(remote=remote, local=str(tmp_path / "c"), batch_size=8)) == list(
        range(120)
    )
    assert _ids(StreamingDataset(local=remote, batch_size=8)) == list(range(120))
