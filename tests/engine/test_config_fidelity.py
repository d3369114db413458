"""Arguments mean what the reference's mean, are checked at construction, and are bounded.

Golden values: tests/core/compat_golden.json (scripts/gen_compat_golden.py, generated with
mosaicml-streaming 0.13.0).
"""

from __future__ import annotations

import json
import os
import time
import warnings
from typing import Any, ClassVar

import numpy as np
import pytest

from astream import MDSWriter, Stream, StreamingDataset
from astream.core.sizes import parse_count, parse_size
from astream.errors import ConfigError, EmptyDatasetError, UnsafeEncodingError
from astream.runtime import config as cfgmod
from astream.runtime.config import DatasetConfig
from astream.stream import StreamRegistry, streams_registry

with open(os.path.join(os.path.dirname(__file__), "..", "core", "compat_golden.json")) as _f:
    GOLDEN = json.load(_f)

DEFAULTS: dict[str, Any] = dict(
    download_retry=2,
    download_timeout=60,
    validate_hash=None,
    epoch_size=None,
    predownload=None,
    cache_limit=None,
    sampling_method="balanced",
    sampling_granularity=1,
    partition_algo="relaxed",
    num_canonical_nodes=None,
    batch_size=None,
    shuffle=False,
    shuffle_algo="astream",
    shuffle_seed=9176,
    shuffle_block_size=None,
    batching_method="random",
    replication=None,
)


def build(**kw: Any) -> DatasetConfig:
    return DatasetConfig.build(**{**DEFAULTS, **kw})


def write(out: str, n: int, columns: dict[str, str] | None = None) -> str:
    with MDSWriter(out=out, columns=columns or {"id": "int"}, size_limit=1 << 10) as w:
        for i in range(n):
            w.write({"id": i} if columns is None else {"obj": i})
    return out


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("fidelity")
    return {
        "a": write(str(root / "a"), 20),
        "b": write(str(root / "b"), 30),
        "d2000": write(str(root / "d2000"), 2000),
        "pkl": write(str(root / "pkl"), 4, {"obj": "pkl"}),
    }


# -- epoch_size counts samples, with the reference's abbreviations -----------------------------
@pytest.mark.parametrize("text", sorted(GOLDEN["abbrev"]))
def test_parse_count_matches_the_reference(text: str) -> None:
    want = GOLDEN["abbrev"][text]
    if "value" in want and want["value"] >= 0:
        assert parse_count(text, "epoch_size") == want["value"]
    else:  # the reference raises (ValueError/OverflowError) or yields a negative count
        with pytest.raises(ConfigError, match="epoch_size"):
            parse_count(text, "epoch_size")


@pytest.mark.parametrize("text", sorted(GOLDEN["bytes"]))
def test_parse_size_matches_the_reference(text: str) -> None:
    want = GOLDEN["bytes"][text]
    if "value" in want:
        assert parse_size(text, "cache_limit") == want["value"]
    else:
        with pytest.raises(ConfigError, match="cache_limit"):
            parse_size(text, "cache_limit")


def test_epoch_size_abbreviations_are_samples_not_bytes() -> None:
    assert build(epoch_size="2b").epoch_size == 2_000_000_000
    assert build(epoch_size="1k").epoch_size == 1_000
    assert build(epoch_size="1K").epoch_size == 1_000
    assert build(epoch_size="1.5m").epoch_size == 1_500_000
    assert build(epoch_size=np.int64(7)).epoch_size == 7
    assert build(epoch_size=12.0).epoch_size == 12
    with pytest.raises(ConfigError, match="epoch_size must be a whole number of samples"):
        build(epoch_size=1.5)
    with pytest.raises(ConfigError, match="epoch_size: cannot parse '1kb'"):
        build(epoch_size="1kb")
    with pytest.raises(ConfigError, match=r"epoch_size must be >= 0 samples, got -5000"):
        build(epoch_size="-5k")


@pytest.mark.parametrize("zero", [0, "0", "0k", ""])
def test_zero_epoch_size_and_cache_limit_mean_unset(zero: Any) -> None:
    # the reference tests `if epoch_size:` / `if cache_limit:`
    assert build(epoch_size=zero).epoch_size is None
    if zero != "0k":
        assert build(cache_limit=zero).cache_limit is None


def test_epoch_size_1k_is_a_thousand_samples(data: dict[str, str]) -> None:
    ds = StreamingDataset(local=data["a"], batch_size=1, epoch_size="1k")
    assert len(ds) == 1000
    ids = [int(s["id"]) for s in ds]
    assert len(ids) == 1000 and sorted(set(ids)) == list(range(20))
    assert sorted(ids) == sorted(list(range(20)) * 50)


# -- everything checked at construction --------------------------------------------------------
@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"shuffle_algo": "bogus"}, "shuffle_algo: unknown algorithm 'bogus'"),
        ({"partition_algo": "bogus"}, "partition_algo"),
        ({"sampling_method": "bogus"}, "sampling_method"),
        ({"batching_method": "bogus"}, "batching_method: unknown method 'bogus'"),
        ({"shuffle": "yes"}, "shuffle must be True or False"),
        ({"validate_hash": "bogus"}, "validate_hash: .*unsupported hash algorithm 'bogus'"),
    ],
)
def test_unknown_options_fail_at_construction(
    data: dict[str, str], kw: dict[str, Any], match: str
) -> None:
    with pytest.raises(ConfigError, match=match):
        StreamingDataset(local=data["a"], batch_size=1, **kw)


@pytest.mark.parametrize(
    "kw",
    [
        {"shuffle_algo": "bogus"},
        {"partition_algo": "bogus"},
        {"sampling_method": "bogus"},
        {"batching_method": "bogus"},
    ],
)
def test_options_are_checked_before_any_index_is_read(kw: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=next(iter(kw))):
        build(**kw)


def test_weights_are_checked_before_any_index_is_read(data: dict[str, str], tmp_path: Any) -> None:
    # as the reference (Stream.validate_weights before loading): the second stream's
    # directory does not even exist, and the weighting error is what the caller sees
    nowhere = str(tmp_path / "nowhere")
    with pytest.raises(ConfigError, match=r"streams\[1\]: relative \(proportion\) and absolute"):
        StreamingDataset(
            streams=[Stream(local=data["a"], proportion=1.0), Stream(local=nowhere)], batch_size=1
        )
    with pytest.raises(ConfigError, match="epoch_size=100 needs relative"):
        StreamingDataset(streams=[Stream(local=nowhere, repeat=2)], epoch_size=100, batch_size=1)


def test_pkl_column_fails_at_construction(data: dict[str, str]) -> None:
    unsafe = "column 'obj' contains an unsafe type: encoding 'pkl'"
    with pytest.raises(UnsafeEncodingError, match=unsafe):
        StreamingDataset(local=data["pkl"], batch_size=1)
    ds = StreamingDataset(local=data["pkl"], batch_size=1, allow_unsafe_types=True)
    assert [s["obj"] for s in ds] == [0, 1, 2, 3]
    with pytest.raises(ConfigError, match="allow_unsafe_types must be True or False"):
        StreamingDataset(local=data["pkl"], batch_size=1, allow_unsafe_types="yes")


def test_impossible_weightings_fail_at_construction(data: dict[str, str]) -> None:
    a, b = data["a"], data["b"]
    with pytest.raises(ConfigError, match=r"streams\[1\]: relative \(proportion\) and absolute"):
        StreamingDataset(
            streams=[Stream(local=a, proportion=1.0), Stream(local=b, repeat=2)], batch_size=1
        )
    with pytest.raises(ConfigError, match="epoch_size=100 needs relative"):
        StreamingDataset(
            streams=[Stream(local=a, choose=5), Stream(local=b)], epoch_size=100, batch_size=1
        )
    with pytest.raises(EmptyDatasetError, match="choose no sample at all"):
        StreamingDataset(
            streams=[Stream(local=a, repeat=0), Stream(local=b, choose=0)], batch_size=1
        )


def test_canonical_nodes_vs_nodes_fails_at_construction(
    data: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # 3 nodes of 1 rank, 2 canonical nodes, the reference's 'orig' partition: neither divides
    # the other. The plan refuses it; the dataset now refuses it when built, not at len().
    for name, value in (("RANK", "0"), ("WORLD_SIZE", "3"), ("LOCAL_WORLD_SIZE", "1")):
        monkeypatch.setenv(name, value)
    kw = dict(local=data["a"], batch_size=1, num_canonical_nodes=2, shuffle_algo="astream")
    try:
        StreamingDataset(partition_algo="orig", **kw)  # type: ignore[arg-type]
    except ConfigError as exc:
        assert "num_canonical_nodes=2" in str(exc) or "partition_algo='orig'" in str(exc)
    else:  # pragma: no cover
        pytest.fail("no ConfigError at construction")
    assert len(StreamingDataset(**kw)) == 7  # relaxed: any node count; 20 samples / 3 ranks


# -- bounds --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "value", "match"),
    [
        ("download_retry", 101, "download_retry=101 is above the supported maximum 100"),
        (
            "download_timeout",
            604801,
            r"download_timeout must be a number of seconds in \(0, 604800\]",
        ),
        ("download_timeout", float("inf"), "download_timeout"),
        ("epoch_size", 2**40 + 1, "epoch_size=1099511627777 samples is above the supported"),
        ("epoch_size", "2t", "epoch_size=2000000000000 samples is above the supported"),
        ("predownload", 2**22 + 1, "predownload=4194305 is above the supported maximum 4194304"),
        ("cache_limit", 2**63, "cache_limit must be 0..9223372036854775807 bytes"),
        ("cache_limit", "-1kb", "cache_limit must be 0..9223372036854775807 bytes"),
        ("sampling_granularity", 2**40 + 1, "sampling_granularity=1099511627777 is above"),
        ("num_canonical_nodes", 2**20 + 1, "num_canonical_nodes=1048577 is above"),
        ("num_canonical_nodes", 10**9, "num_canonical_nodes=1000000000 is above"),
        ("batch_size", 10**12, "batch_size=1000000000000 is above the supported maximum 1048576"),
        ("shuffle_seed", 2**63, "shuffle_seed=9223372036854775808 is above"),
        ("shuffle_block_size", 2**40 + 1, "shuffle_block_size=1099511627777 is above"),
        ("replication", 2**20 + 1, "replication=1048577 is above"),
    ],
)
def test_numeric_bounds(name: str, value: Any, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        build(**{name: value})


def test_bounds_of_stream_arguments(tmp_path: Any) -> None:
    with pytest.raises(ConfigError, match="download_retry must be at most 100, got 101"):
        Stream(local=str(tmp_path), download_retry=101)
    with pytest.raises(ConfigError, match="download_timeout must be at most 604800"):
        Stream(local=str(tmp_path), download_timeout=604801)
    with pytest.raises(ConfigError, match="choose must be at most 1099511627776"):
        Stream(local=str(tmp_path), choose=2**40 + 1)
    with pytest.raises(ConfigError, match=r"repeat must be at most 1\.04858e"):
        Stream(local=str(tmp_path), repeat=2.0**20 + 1)
    with pytest.raises(ConfigError, match=r"validate_hash: .*unsupported hash algorithm 'bogus'"):
        Stream(local=str(tmp_path), validate_hash="bogus")
    with pytest.raises(ConfigError, match="keep_zip must be a bool or None"):
        Stream(local=str(tmp_path), keep_zip="yes")  # type: ignore[arg-type]


def test_huge_epoch_fails_at_construction_not_in_numpy(data: dict[str, str]) -> None:
    # was a numpy MemoryError (TiBs) at the first iteration
    with pytest.raises(
        ConfigError, match=r"about 50000000000 planned pieces .* 4194304 \(2\*\*22\)"
    ):
        StreamingDataset(local=data["a"], batch_size=1, epoch_size=10**12)
    with pytest.raises(ConfigError, match="batch_size=1000000000000 is above"):
        StreamingDataset(local=data["a"], batch_size=10**12)
    with pytest.raises(ConfigError, match="planned pieces"):
        StreamingDataset(streams=[Stream(local=data["d2000"], repeat=2.0**20)], batch_size=1)


def test_values_at_the_bounds_cost_little(data: dict[str, str]) -> None:
    """At their maximum, the arguments whose cost could grow stay cheap on a 2,000-sample
    dataset (num_canonical_nodes=10**7 used to take 60 s)."""
    t = time.perf_counter()
    for kw in (
        # astream's own order: a reference order refuses canonical nodes without samples
        {"num_canonical_nodes": 2**20, "shuffle": True, "shuffle_algo": "astream"},
        {"sampling_granularity": 2**40, "shuffle": True},
        {"shuffle_block_size": 2**40, "shuffle": True},
        {"shuffle_seed": 2**63 - 1, "shuffle": True},
        {"predownload": 2**22},
    ):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ds = StreamingDataset(local=data["d2000"], batch_size=4, **kw)  # type: ignore[arg-type]
            ids = sorted(int(s["id"]) for s in ds)
        assert ids == list(range(2000)), kw
    assert time.perf_counter() - t < 30


# -- resolved Stream attributes and the registry -----------------------------------------------
WEIGHT_TIES = {"proportion_even"}  # 50 x (0.25, 0.75): a tie at .5 (see test below)


@pytest.mark.parametrize("case", sorted(GOLDEN["weights"]))
def test_resolved_stream_weights_match_the_reference(data: dict[str, str], case: str) -> None:
    from scripts.gen_compat_golden import WEIGHTINGS

    wa, wb, epoch = WEIGHTINGS[case]
    streams = [Stream(local=data["a"], **wa), Stream(local=data["b"], **wb)]
    ds = StreamingDataset(streams=streams, epoch_size=epoch, batch_size=1)
    golden = GOLDEN["weights"][case]
    got = [{"proportion": s.proportion, "repeat": s.repeat, "choose": s.choose} for s in streams]
    assert got == golden["streams"]  # the default order draws ties as the reference does
    if case in WEIGHT_TIES:
        # the reference gives the leftover sample to a random stream (its seeded rng chose
        # stream 1); astream's own order's largest remainder breaks the tie toward the lower
        # stream index
        assert [g["choose"] for g in golden["streams"]] == [12, 38]
        own = [Stream(local=data["a"], **wa), Stream(local=data["b"], **wb)]
        StreamingDataset(streams=own, epoch_size=epoch, batch_size=1, shuffle_algo="astream")
        assert [s.choose for s in own] == [13, 37]
        assert [s.proportion for s in own] == [0.25, 0.75]
        assert [s.repeat for s in own] == [13 / 20, 37 / 30]
    assert sum(g["choose"] for g in got) == golden["epoch_size"]
    assert len(ds) == golden["epoch_size"]
    assert all(isinstance(g["choose"], int) and isinstance(g["repeat"], float) for g in got)


def test_a_stream_is_reusable_after_resolution(data: dict[str, str]) -> None:
    s = Stream(local=data["a"], repeat=0.5)
    StreamingDataset(streams=[s], batch_size=1)
    assert (s.proportion, s.repeat, s.choose) == (1.0, 0.5, 10)
    assert (s.download_retry, s.download_timeout, s.validate_hash) == (2, 60.0, None)
    ds = StreamingDataset(streams=[s], batch_size=1, download_retry=5)
    assert len(ds) == 10 and s.download_retry == 5


class RecordingStream(Stream):
    built: ClassVar[list[dict[str, Any]]] = []

    def __init__(self, *, tag: str = "", **kw: Any) -> None:
        super().__init__(**kw)
        RecordingStream.built.append({"tag": tag, **kw})


def test_stream_registry(data: dict[str, str]) -> None:
    assert streams_registry.get("stream") is Stream
    streams_registry.register("recording", func=RecordingStream)
    RecordingStream.built.clear()
    ds = StreamingDataset(
        local=data["a"], batch_size=1, stream_name="recording", stream_config={"tag": "x"}
    )
    assert len(ds) == 20
    assert RecordingStream.built == [
        {
            "tag": "x",
            "remote": None,
            "local": data["a"],
            "split": None,
            "download_retry": None,
            "download_timeout": None,
            "validate_hash": None,
            "keep_zip": None,
        }
    ]
    with pytest.raises(
        ConfigError, match=r"stream_name='nope' is not registered; known: .*recording"
    ):
        StreamingDataset(local=data["a"], batch_size=1, stream_name="nope")
    with pytest.raises(ConfigError, match=r"stream_config sets \['local'\]"):
        StreamingDataset(local=data["a"], batch_size=1, stream_config={"local": "/x"})
    with pytest.raises(ConfigError, match="with `streams`, construct each stream yourself"):
        StreamingDataset(streams=[Stream(local=data["a"])], batch_size=1, stream_name="recording")
    with pytest.raises(ConfigError, match="stream_name='recording': cannot build it"):
        StreamingDataset(
            local=data["a"], batch_size=1, stream_name="recording", stream_config={"unknown_kw": 1}
        )
    reg = StreamRegistry()

    @reg.register("deco")
    class Deco(Stream):
        pass

    assert reg.get("deco") is Deco and "deco" in reg and reg.get_all() == {"deco": Deco}


def test_bounds_are_documented() -> None:
    doc = cfgmod.__doc__ or ""
    for name in (
        "download_retry",
        "download_timeout",
        "epoch_size",
        "predownload",
        "cache_limit",
        "sampling_granularity",
        "num_canonical_nodes",
        "batch_size",
        "shuffle_seed",
        "shuffle_block_size",
        "replication",
        "Stream.repeat",
        "Stream.choose",
    ):
        assert f"\n{name} " in doc, name


def test_bounds_after_construction(data: dict[str, str]) -> None:
    from astream import StreamingDataLoader

    ds = StreamingDataset(local=data["a"])
    with pytest.raises(ConfigError, match="batch_size=1000000000000 is above"):
        StreamingDataLoader(ds, batch_size=10**12)  # sets the dataset's batch_size
    with pytest.raises(ConfigError, match="num_canonical_nodes=1048577 is above"):
        ds.load_state_dict(
            {"epoch": 0, "sample_in_epoch": 0, "num_canonical_nodes": 2**20 + 1, "shuffle_seed": 1}
        )
    with pytest.raises(ConfigError, match="num_workers=1025 is above the supported maximum 1024"):
        StreamingDataLoader(
            StreamingDataset(local=data["a"], batch_size=2), batch_size=2, num_workers=1025
        )


def test_writer_max_workers(tmp_path: Any, s3_bucket: str) -> None:
    for bad in (0, 257, True, 2.0):
        with pytest.raises(
            ConfigError,
            match=r"max_workers \(concurrent uploads\) must be an int "
            r"in 1\.\.256",
        ):
            MDSWriter(out=str(tmp_path / f"w{bad}"), columns={"id": "int"}, max_workers=bad)
    # the value reaches the upload sink (it was dropped before)
    with MDSWriter(
        out=(str(tmp_path / "up"), f"{s3_bucket}/mw-{os.getpid()}"),
        columns={"id": "int"},
        max_workers=3,
    ) as w:
        w.write({"id": 1})
        assert w._sink._max == 3  # type: ignore[attr-defined]


def test_stream_paths_may_be_pathlike(data: dict[str, str]) -> None:
    from pathlib import Path

    s = Stream(local=Path(data["a"]))
    assert s.local == data["a"]
    assert len(StreamingDataset(streams=[s], batch_size=1)) == 20
    with pytest.raises(ConfigError, match="local must be a str or None, got int"):
        Stream(local=3)  # type: ignore[arg-type]
