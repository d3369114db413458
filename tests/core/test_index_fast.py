"""The fast index path accepts exactly what the validating parser accepts, with the same result,
and defers every refusal to it (same error message); shard tables behave as lists of entries."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from astream.core.index import Index, dump_index, parse_index, parse_index_validating
from astream.core.index_fast import CHUNK, parse_mds_fast
from astream.core.shard_table import ShardTable
from astream.errors import FormatError

CONFIGS = [
    (["int", "int", "ndarray:uint16"], ["id", "label", "payload"], [8, 8, None]),
    (["str", "float32"], ["text", "x"], [None, 4]),
    (["bytes"], ["b"], [None]),
]


def _shard(i: int, cfg: int, comp: str | None, hashes: list[str], samples: int) -> dict[str, Any]:
    encs, names, sizes = CONFIGS[cfg]
    digests = {h: f"{h}-{i:08x}" for h in hashes}
    zip_ = {"basename": f"s/{i}.mds.zstd", "bytes": 100 + i, "hashes": digests} if comp else None
    return {
        "column_encodings": list(encs), "column_names": list(names), "column_sizes": list(sizes),
        "compression": comp, "format": "mds", "hashes": list(hashes),
        "raw_data": {"basename": f"s/{i}.mds" if i % 3 else f"{i}.mds",
                     "bytes": 8 + 4 * samples + 1000 + i, "hashes": digests},
        "samples": samples, "size_limit": 1 << 26 if i % 2 else None, "version": 2,
        "zip_data": zip_,
    }  # fmt: skip


# (path inside shard k, new value); KeyError deletes, "+" adds an unknown key
MUTATIONS: list[tuple[str, Any]] = [
    ("samples", True), ("samples", -1), ("samples", 2.0), ("samples", "3"), ("samples", 10**9),
    ("samples", 2**70), ("version", 2.0), ("version", 3), ("version", True), ("format", "json"),
    ("format", "bogus"), ("compression", "lz4"), ("compression", "zstd"), ("compression", None),
    ("size_limit", -5), ("size_limit", False), ("hashes", ["sha1", 3]), ("hashes", "sha1"),
    ("column_sizes", [8, 8, 2]), ("column_sizes", [True, 8, None]),
    ("column_encodings", ["int", "int", "nope"]), ("column_names", ["a", "a", "b"]),
    ("column_names", ["a"]), ("raw_data.basename", "../x"), ("raw_data.basename", "/abs"),
    ("raw_data.basename", "a//b"), ("raw_data.basename", "C:x"), ("raw_data.basename", "."),
    ("raw_data.basename", "ok/fine.mds"), ("raw_data.basename", "dup"), ("raw_data.bytes", 2**32),
    ("raw_data.bytes", -1), ("raw_data.bytes", 1.5), ("raw_data.hashes", {"sha1": 1}),
    ("raw_data.hashes", []), ("raw_data.extra", 1), ("raw_data", None), ("raw_data", []),
    ("zip_data", {"basename": "z", "bytes": 1, "hashes": {}}), ("samples", KeyError),
    ("zip_data", KeyError), ("+", 1),
]  # fmt: skip


def _mutate(obj: dict[str, Any], k: int, path: str, value: Any) -> None:
    shards = obj["shards"]
    if not shards:
        obj["version"] = value if path == "version" else obj["version"]
        return
    target = shards[k % len(shards)]
    if path == "+":
        target["unknown"] = value
    elif path == "raw_data.basename" and value == "dup":
        target["raw_data"]["basename"] = shards[0]["raw_data"]["basename"]
        if k % len(shards) == 0 and len(shards) > 1:
            shards[1]["raw_data"]["basename"] = shards[0]["raw_data"]["basename"]
    elif "." in path:
        outer, inner = path.split(".")
        if isinstance(target.get(outer), dict):
            target[outer][inner] = value
    elif value is KeyError:
        target.pop(path, None)
    else:
        target[path] = value


def _outcome(fn: Any, data: bytes) -> Any:
    try:
        index = fn(data, "idx")
    except FormatError as exc:
        return ("error", str(exc))
    return ("ok", [e.to_json() for e in index.shards], index.extra, index.shards)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(0, 12),
    cfgs=st.lists(st.integers(0, len(CONFIGS) - 1), min_size=12, max_size=12),
    comp=st.sampled_from([None, "zstd:3"]),
    hashes=st.sampled_from([[], ["xxh64"], ["sha1", "xxh64"]]),
    samples=st.lists(st.integers(0, 50), min_size=12, max_size=12),
    extra=st.sampled_from([{}, {"note": "x", "n": [1, 2.5, None]}]),
    mutations=st.lists(
        st.tuples(st.integers(0, 11), st.sampled_from(range(len(MUTATIONS)))), max_size=2
    ),
)
def test_fast_path_agrees_with_the_validating_parser(
    n: int,
    cfgs: list[int],
    comp: str | None,
    hashes: list[str],
    samples: list[int],
    extra: dict[str, Any],
    mutations: list[tuple[int, int]],
) -> None:
    obj: dict[str, Any] = {
        "shards": [_shard(i, cfgs[i], comp, hashes, samples[i]) for i in range(n)],
        "version": 2,
        **extra,
    }
    for k, m in mutations:
        _mutate(obj, k, *MUTATIONS[m])
    data = json.dumps(obj).encode()
    fast, slow = _outcome(parse_index, data), _outcome(parse_index_validating, data)
    assert fast[:3] == slow[:3]
    if not mutations and n:
        assert slow[0] == "ok"  # the generator makes valid indexes; mutations break some
    if fast[0] == "ok":
        assert isinstance(fast[3], ShardTable) and fast[3] == slow[3]


def test_fast_path_is_taken_and_keeps_one_template_per_configuration() -> None:
    n = CHUNK + 100  # crosses a chunk boundary
    obj = {"shards": [_shard(i, (i // 1000) % 2, None, ["xxh64"], 3) for i in range(n)],
           "version": 2}  # fmt: skip
    data = json.dumps(obj).encode()
    asked: list[str] = []
    got = parse_mds_fast(data, lambda where, o: asked.append(where))
    # once per configuration (size_limit alternates, the columns change every 1000 shards)
    assert got is not None and asked == ["shards[0]", "shards[1]", "shards[1000]", "shards[1001]"]
    index = parse_index(data, "idx")
    table = index.table
    assert table._entries is None and len(table.templates) == 4
    assert table.kind.tolist() == [(i // 1000) % 2 * 2 + i % 2 for i in range(n)]
    assert [i for i, _ in table.configs()] == [0, 1, 1000, 1001]
    assert table == parse_index_validating(data, "idx").shards
    assert dump_index(index) == dump_index(parse_index_validating(data, "idx"))
    assert index.sample_counts().tolist() == [3] * n and index.num_samples == 3 * n
    assert table[-1].raw_data.basename == f"s/{n - 1}.mds" and table[4].raw_data.hashes == {
        "xxh64": "xxh64-00000004"
    }
    assert [e.samples for e in table[2:5]] == [3, 3, 3]
    with pytest.raises(IndexError):
        table[n]
    assert table.footprints().tolist() == [8 + 12 + 1000 + i for i in range(n)]


def test_compressed_columns_and_footprints() -> None:
    obj = {"shards": [_shard(i, 0, "zstd:3", [], 2) for i in range(5)], "version": 2}
    index = parse_index(json.dumps(obj).encode(), "idx")
    assert index.table._entries is None
    assert index.table.zip_bytes is not None and index.table.zip_bytes.tolist() == [
        100, 101, 102, 103, 104
    ]  # fmt: skip
    assert index.table.footprints().tolist() == [(8 + 8 + 1000 + i) + 100 + i for i in range(5)]
    assert (
        index.shards[2].zip_data is not None and index.shards[2].zip_data.basename == "s/2.mds.zstd"
    )


def test_a_list_of_entries_is_served_as_given() -> None:
    obj = {"shards": [_shard(i, 1, None, [], 1) for i in range(3)], "version": 2}
    entries = list(parse_index_validating(json.dumps(obj).encode(), "idx").shards)
    index = Index(entries)
    assert isinstance(index.shards, ShardTable) and index.shards[1] is entries[1]
    assert index.shards == entries and entries == index.shards
    assert Index(index.shards).shards is index.shards


@pytest.mark.parametrize("mutation", MUTATIONS, ids=[f"{p}={v!r}" for p, v in MUTATIONS])
@pytest.mark.parametrize("comp", [None, "zstd:3"])
def test_each_mutation_of_a_shard_past_the_first_of_its_configuration(
    mutation: tuple[str, Any], comp: str | None
) -> None:
    # shard 5 shares its configuration with shard 0, so only the per-shard checks see it
    obj = {"shards": [_shard(i, 0, comp, ["xxh64"], 4) for i in range(8)], "version": 2}
    for s in obj["shards"]:
        s["size_limit"] = 1 << 26
    _mutate(obj, 5, *mutation)
    data = json.dumps(obj).encode()
    fast, slow = _outcome(parse_index, data), _outcome(parse_index_validating, data)
    assert fast[:3] == slow[:3]


def test_file_names_cover_data_zip_and_meta_files() -> None:
    from astream.core.shard_entry import FileInfo, ShardEntry

    def entry(i: int, meta: bool) -> ShardEntry:
        return ShardEntry(
            format="json" if meta else "mds", column_encodings=["str"], column_names=["t"],
            column_sizes=[None], compression="zstd:3" if i else None, hashes=[],
            raw_data=FileInfo(f"d{i}", 10, {}),
            zip_data=FileInfo(f"d{i}.zstd", 5, {}) if i else None, samples=1, size_limit=None,
            raw_meta=FileInfo(f"m{i}", 4, {}) if meta else None,
            zip_meta=FileInfo(f"m{i}.zstd", 3, {}) if meta and i else None,
        )  # fmt: skip

    table = Index([entry(0, True), entry(1, True)]).table
    assert list(table.file_names()) == ["d0", "m0", "d1", "d1.zstd", "m1", "m1.zstd"]
    assert table.footprints().tolist() == [10 + 4, 10 + 5 + 4 + 3]
