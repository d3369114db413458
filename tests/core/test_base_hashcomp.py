"""``astream.base.hashing``, ``.compression`` and ``.distributed`` answer as the reference's
modules of those names (golden: ``scripts/gen_mosaic_hashcomp_golden.py``, the reference's own
answers), except where astream refuses on purpose (listed here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from astream.base import compression, distributed, hashing
from astream.errors import ConfigError
from scripts.gen_mosaic_hashcomp_golden import DATA, answers

GOLDEN = json.loads((Path(__file__).parent / "golden" / "mosaic_hashcomp.json").read_text())
OURS = answers(hashing, compression, distributed)


@pytest.mark.parametrize("name", sorted(set(GOLDEN) - {"reference", "classes"}))
def test_as_the_reference(name: str) -> None:
    assert OURS[name] == GOLDEN[name]


@pytest.mark.parametrize("cls", sorted(GOLDEN["classes"]))
def test_classes_as_the_reference(cls: str) -> None:
    ours, theirs = dict(OURS["classes"][cls]), dict(GOLDEN["classes"][cls])
    if cls == "Snappy":  # the reference's snappy encodes a str; astream refuses non-bytes
        assert theirs["bad_data"][2] == b"\x07\x18bigdata".hex()
        assert ours["bad_data"][2] == {"error": ["TypeError"]}
        ours["bad_data"] = theirs["bad_data"] = ours["bad_data"][:2]
    assert ours == theirs


def test_codec_objects_write_the_module_functions_bytes() -> None:
    codecs = [(compression.Brotli(1), "br:1"), (compression.Zstandard(), "zstd:3"),
              (compression.Bzip2(2), "bz2:2"), (compression.Snappy(), "snappy")]  # fmt: skip
    for obj, algo in codecs:
        assert obj.compress(DATA[2]) == compression.compress(algo, DATA[2])
        assert obj.level == (None if algo == "snappy" else int(algo.split(":")[1]))


def test_bad_levels_are_config_errors_naming_the_level() -> None:
    with pytest.raises(ConfigError, match="level 12 is not one of"):
        compression.Brotli(12)
    with pytest.raises(ConfigError, match="Snappy takes no level, got 1"):
        compression.Snappy(1)
    with pytest.raises(ConfigError, match="'sha3'"):
        hashing.get_hash("sha3", b"x")


def _rank_main(rank: int, port: int, out: str) -> None:
    import os

    import torch.distributed as dist

    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        os.environ.pop(key, None)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)  # fmt: skip
    try:
        distributed.barrier()
        got = [distributed.get_rank(), distributed.get_world_size(),
               distributed.all_gather_object(f"r{rank}")]  # fmt: skip
        Path(out, f"{rank}.json").write_text(json.dumps(got))
    finally:
        dist.destroy_process_group()


def test_a_process_group_answers_without_torchrun_variables(tmp_path: Path) -> None:
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_rank_main, args=(port, str(tmp_path)), nprocs=2, join=True)
    got = [json.loads((tmp_path / f"{r}.json").read_text()) for r in (0, 1)]
    assert got == [[0, 2, ["r0", "r1"]], [1, 2, ["r0", "r1"]]]


def test_construct_from_registry_builds_streams_and_binds_functions(tmp_path: Path) -> None:
    from astream.base.registry_utils import construct_from_registry
    from astream.core.stream import StreamRegistry
    from astream.stream import Stream, streams_registry

    stream = construct_from_registry(
        "stream", streams_registry, partial_function=False, kwargs={"local": str(tmp_path)}
    )
    assert isinstance(stream, Stream) and stream.local == str(tmp_path)
    reg = StreamRegistry()
    reg.register("add", func=lambda a, b: a + b)
    bound = construct_from_registry("add", reg, kwargs={"a": 2})
    assert bound(b=3) == 5
    assert construct_from_registry("add", reg, partial_function=False, kwargs={"a": 1, "b": 1}) == 2
    seen: list[object] = []
    construct_from_registry("stream", streams_registry, pre_validation_function=Stream,
                            post_validation_function=seen.append,
                            kwargs={"local": str(tmp_path)})  # fmt: skip
    assert isinstance(seen[0], Stream)
    with pytest.raises(ConfigError, match="not a subclass of"):
        construct_from_registry("add", reg, pre_validation_function=Stream)
    with pytest.raises(ConfigError, match="is not registered"):
        construct_from_registry("nope", streams_registry)
