"""Stream resolution (astream.runtime.resolve): what is refused before any index is loaded."""

from __future__ import annotations

from pathlib import Path

import pytest

from astream import Stream, StreamingDataset
from astream.errors import ConfigError


def test_two_streams_of_one_remote_need_the_same_retry_policy(tmp_path: Path) -> None:
    # refused while planning the streams, before any request: the remote is never reached
    remote = "s3://astream-never-reached/data"
    a = Stream(remote=remote, local=str(tmp_path / "a"), download_retry=1)
    b = Stream(remote=remote, local=str(tmp_path / "b"), download_retry=3)
    with pytest.raises(ConfigError) as info:
        StreamingDataset(streams=[a, b], batch_size=4)
    assert str(info.value) == (
        f"streams[1]: {remote} is also another stream's remote, with other "
        "download_retry/download_timeout; give both streams the same"
    )
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
