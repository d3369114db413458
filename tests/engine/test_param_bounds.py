"""Every numeric parameter has a bound: a value past it is a ConfigError naming the parameter,
the value and the bound (table and reasons: astream/runtime/config.py).

``test_every_numeric_parameter_is_listed`` keeps the lists below complete: a new numeric
parameter of StreamingDataset, Stream or MDSWriter fails it until a case is added here."""

from __future__ import annotations

import inspect
import os
from typing import Any

import pytest

from astream import MDSWriter, Stream, StreamingDataset
from astream.errors import ConfigError

# (parameter, a value past its bound, what the message must say)
DATASET = [
    ("download_retry", 101, "download_retry=101 is above the supported maximum 100"),
    ("download_timeout", 604801, r"download_timeout must be .* in \(0, 604800\], got 604801"),
    ("epoch_size", 2**40 + 1, "epoch_size=1099511627777 samples is above the supported maximum"),
    ("predownload", 2**22 + 1, "predownload=4194305 is above the supported maximum 4194304"),
    ("cache_limit", 2**63, "cache_limit must be 0..9223372036854775807 bytes .*got 922337"),
    ("sampling_granularity", 2**40 + 1, "sampling_granularity=1099511627777 is above"),
    ("num_canonical_nodes", 2**20 + 1, "num_canonical_nodes=1048577 is above .* 1048576"),
    ("batch_size", 2**20 + 1, "batch_size=1048577 is above the supported maximum 1048576"),
    ("shuffle_seed", 2**63, "shuffle_seed=9223372036854775808 is above"),
    ("shuffle_block_size", 2**40 + 1, "shuffle_block_size=1099511627777 is above"),
    ("replication", 2**20 + 1, "replication=1048577 is above the supported maximum 1048576"),
    ("pack_to", 10**9, r"pack_to must be in 1\.\.16777216 .*got 1000000000"),
    ("pack_to", 2**24 + 1, r"pack_to must be in 1\.\.16777216 .*got 16777217"),
    ("pack_pad_id", 70000, r"pack_pad_id=70000 .*uint16"),
    pytest.param(
        "range_first_batches",
        10**12,
        r"range_first_batches must be an int in 0\.\.1048576, got 1000000000000",
    ),
    ("random_memory", 2**46 + 1, r"random_memory must be an int of bytes in 0\.\.70368744177664"),
    ("map_memory", 2**46 + 1, r"map_memory must be an int of bytes in 0\.\.70368744177664 or None"),
]
STREAM = [
    ("proportion", 1e300, r"proportion must be at most 9\.0072e\+15, got 1e\+300"),
    ("repeat", 2.0**20 + 1, r"repeat must be at most 1\.04858e\+06, got 1048577"),
    ("choose", 2**40 + 1, r"choose must be at most 1099511627776, got 1099511627777"),
    ("download_retry", 101, "download_retry must be at most 100, got 101"),
    ("download_timeout", 604801, "download_timeout must be at most 604800, got 604801"),
]
WRITER = [
    ("size_limit", 2**32, r"`size_limit` must be less than 2\*\*32 .*got 4294967296"),
    ("max_workers", 257, r"max_workers .* 1\.\.256, got 257"),
    ("compression", "zstd:99", r"compression: level 99 out of range for zstd"),
    pytest.param(
        "retry",
        10**9,
        r"retry must be an int in 0\.\.100 or a RetryPolicy, got 1000000000",
    ),
]
# parameters that look numeric but are not counts to bound (flags, ids checked elsewhere)
NOT_BOUNDED: set[str] = set()


def _names(cases: list[Any]) -> set[str]:
    return {c.values[0] if hasattr(c, "values") else c[0] for c in cases}


def _numeric(fn: Any) -> set[str]:
    out = set()
    for p in inspect.signature(fn).parameters.values():
        ann = str(p.annotation)
        if ("int" in ann or "float" in ann) and p.name != "self":
            out.add(p.name)
    return out


def test_every_numeric_parameter_is_listed() -> None:
    from astream.dataset import StreamingCore

    assert _numeric(StreamingCore.__init__) - NOT_BOUNDED <= _names(DATASET)
    assert _numeric(Stream.__init__) - NOT_BOUNDED <= _names(STREAM)
    assert _numeric(MDSWriter.__init__) | {"retry"} <= _names(WRITER) | {"compression"}


@pytest.mark.parametrize(("name", "value", "match"), DATASET)
def test_dataset_parameter_bounds(
    local_dataset: tuple[str, Any], name: str, value: Any, match: str
) -> None:
    path, _ = local_dataset
    kw: dict[str, Any] = {"local": path, "batch_size": 4, name: value}
    if name == "pack_pad_id":
        kw["pack_to"] = 16
    if name.startswith("pack_"):
        kw["pack_column"] = "ids"
    with pytest.raises(ConfigError, match=match):
        StreamingDataset(**kw)


@pytest.mark.parametrize(("name", "value", "match"), STREAM)
def test_stream_parameter_bounds(name: str, value: Any, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        Stream(local="/nowhere", **{name: value})


@pytest.mark.parametrize(("name", "value", "match"), WRITER)
def test_writer_parameter_bounds(
    request: pytest.FixtureRequest, tmp_path: Any, name: str, value: Any, match: str
) -> None:
    out: Any = str(tmp_path / "o")
    if name == "retry":  # only a remote output uses it; the S3 emulator answers at once
        out = f"{request.getfixturevalue('s3_bucket')}/bounds-retry"
    with pytest.raises(ConfigError, match=match):
        w = MDSWriter(out=out, columns={"x": "int"}, **{name: value})
        w._close()


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--workers", "1025"], r"--workers must be in 1\.\.1024, got 1025"),
        (["--workers", "0"], r"--workers must be in 1\.\.1024, got 0"),
        (["--size-limit", "5gb"], r"`size_limit` must be less than 2\*\*32 and not negative"),
        (["--compression", "zstd:99"], "level 99 out of range"),
    ],
)
def test_cli_convert_option_bounds(
    tmp_path: Any, capsys: pytest.CaptureFixture[str], argv: list[str], match: str
) -> None:
    import re

    from astream.cli import main

    src = tmp_path / "in.jsonl"
    src.write_text('{"x": 1}\n')
    code = main(["convert", str(src), os.fspath(tmp_path / "out"), *argv])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("astream: error: ") and err.count("\n") == 1, err
    assert re.search(match, err), err
