"""The reference's module paths under ``astream.base``: each name answers as the reference's
(golden: ``scripts/gen_mosaic_base_golden.py``, the reference's own answers), and the names
without a golden value do what their docstrings say."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from astream import MDSWriter, StreamingDataset
from astream.base import array, storage, util
from astream.base.format.mds import encodings
from astream.errors import ConfigError, ObjectNotFoundError
from scripts.gen_mosaic_base_golden import answers

GOLDEN = json.loads((Path(__file__).parent / "golden" / "mosaic_base.json").read_text())
OURS = answers(util, encodings, array.Array)


@pytest.mark.parametrize("name", sorted(set(GOLDEN) - {"reference"}))
def test_as_the_reference(name: str) -> None:
    assert OURS[name] == GOLDEN[name]


def test_refusals_are_config_errors() -> None:
    for bad in (lambda: util.bytes_to_int("abc"), lambda: util.number_abbrev_to_int("1kb")):
        with pytest.raises(ConfigError, match="cannot parse"):
            bad()
    with pytest.raises(ConfigError, match="unsupported encoding 'nope'"):
        encodings.mds_decode("nope", b"")


def test_merge_index_is_astream_s(tmp_path: Path) -> None:
    for part in ("p0", "p1"):
        with MDSWriter(out=str(tmp_path / part), columns={"x": "int"}) as w:
            for i in range(3):
                w.write({"x": i})
    util.merge_index(str(tmp_path), keep_local=True)
    ds = StreamingDataset(local=str(tmp_path), batch_size=2)
    assert sorted(s["x"] for s in ds) == [0, 0, 1, 1, 2, 2]


def test_retry_attempts_cleans_up_and_raises_the_last() -> None:
    calls: list[str] = []

    @util.retry(KeyError, clean_up_fn=lambda: calls.append("clean"), num_attempts=3,
                initial_backoff=0.001, max_jitter=0)  # fmt: skip
    def flaky() -> str:
        calls.append("try")
        if calls.count("try") < 3:
            raise KeyError("not yet")
        return "done"

    assert flaky() == "done" and calls == ["try", "clean", "try", "clean", "try"]

    @util.retry
    def never() -> None:
        raise ValueError("no")

    with pytest.raises(ValueError, match="no"):
        util.retry(ValueError, num_attempts=2, initial_backoff=0)(never.__wrapped__)()
    with pytest.raises(TypeError):  # not among the classes retried: at once
        util.retry([KeyError, OSError], initial_backoff=60)(lambda: 1 + "")()
    with pytest.raises(ConfigError, match="num_attempts must be >= 1"):
        util.retry(num_attempts=0)


def test_the_small_helpers(tmp_path: Path) -> None:
    util.clean_stale_shared_memory()  # nothing to clean, and no error
    assert "astream[parquet]" in util.get_import_exception_message("pyarrow", "parquet")
    target = tmp_path / "late"
    timer = threading.Timer(0.05, target.write_text, ("x",))
    timer.start()
    util.wait_for_file_to_exist(str(target), 0.01, 5, "waited")
    timer.join()
    with pytest.raises(RuntimeError, match=r"waited: .*never did not appear"):
        util.wait_for_file_to_exist(str(tmp_path / "never"), 0.01, 0.05, "waited")


def test_download_copies_one_object(tmp_path: Path) -> None:
    src = tmp_path / "remote" / "a.bin"
    src.parent.mkdir()
    src.write_bytes(b"payload")
    local = tmp_path / "cache" / "sub" / "a.bin"
    storage.CloudDownloader.direct_download(str(src), str(local))
    assert local.read_bytes() == b"payload"
    src.write_bytes(b"changed")  # an existing local file is kept, as the reference keeps it
    storage.CloudDownloader.get(str(src)).download(str(src), str(local))
    assert local.read_bytes() == b"payload"
    with pytest.raises(ObjectNotFoundError):
        storage.CloudDownloader.direct_download(str(src) + ".missing", str(tmp_path / "m"))
    with pytest.raises(ConfigError, match="no remote given"):
        storage.CloudDownloader.direct_download(None, str(tmp_path / "none"))
    assert not os.path.exists(tmp_path / "none")
