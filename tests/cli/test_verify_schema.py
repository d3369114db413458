"""``astream verify`` checks every index.json entry against the format's schema: unknown and
missing keys, value types, and the ``hashes`` list against the digests the files really have.
Each problem is reported (exit 1) and the other shards are still verified."""

from __future__ import annotations

import json
import os
import uuid
from typing import Any

import pytest

from astream import CSVWriter, MDSWriter
from astream.core.hashing import hexdigest
from astream.storage.sync import upload

COLUMNS = {"id": "int", "text": "str"}


def _write(path: str, *, hashes: list[str] | None = None, compression: str | None = None) -> str:
    with MDSWriter(out=path, columns=COLUMNS, size_limit=1500, hashes=hashes,
                   compression=compression) as w:  # fmt: skip
        for i in range(400):
            w.write({"id": i, "text": f"text {i} " * 3})
    return path


def _index(path: str) -> dict[str, Any]:
    with open(os.path.join(path, "index.json")) as f:
        out: dict[str, Any] = json.load(f)
    return out


def _save(path: str, idx: dict[str, Any]) -> None:
    with open(os.path.join(path, "index.json"), "w") as f:
        f.write(json.dumps(idx, sort_keys=True))


def _digest(path: str, name: str, algo: str) -> str:
    with open(os.path.join(path, name), "rb") as f:
        return hexdigest(algo, f.read())


@pytest.fixture
def hashed(tmp_path: Any) -> str:
    return _write(str(tmp_path / "h"), hashes=["sha1", "xxh64"])


def _problems(cli: Any, path: str, *extra: str) -> list[dict[str, str]]:
    r = cli("verify", path, "--json", *extra)
    assert r.code == 1, (r.code, r.out, r.err)
    out: list[dict[str, str]] = r.json()["problems"]
    return out


def test_misspelt_key_is_reported_and_other_shards_verified(cli: Any, hashed: str) -> None:
    idx = _index(hashed)
    n = len(idx["shards"])
    e = idx["shards"][1]
    e["Xolumn_names"] = e.pop("column_names")
    _save(hashed, idx)
    r = cli("verify", hashed, "--json")
    assert r.code == 1, r.err
    out = r.json()
    head = "shards[1] (shard.00001.mds): "
    assert out["problems"] == [
        {"file": "index.json", "problem": head + "missing key 'column_names'"},
        {
            "file": "index.json",
            "problem": head + "unknown key 'Xolumn_names' (did you mean 'column_names'?)",
        },
    ]
    assert (out["shards"], out["files_checked"]) == (n, n - 1)  # the others were read
    text = cli("verify", hashed)
    assert text.code == 1
    assert (
        "MISMATCH index.json: shards[1] (shard.00001.mds): unknown key 'Xolumn_names' "
        "(did you mean 'column_names'?)" in text.out.splitlines()
    )
    # a document that is not an index at all stays an error (exit 2), not a problem list
    idx["version"] = 3
    _save(hashed, idx)
    r = cli("verify", hashed)
    assert r.code == 2 and r.err.startswith("astream: error: ")


def test_every_bad_entry_is_reported(cli: Any, hashed: str) -> None:
    idx = _index(hashed)
    idx["shards"][0]["extra"] = 1
    del idx["shards"][2]["samples"]
    idx["shards"][3]["raw_data"]["bites"] = idx["shards"][3]["raw_data"].pop("bytes")
    idx["shards"][4] = ["not", "an", "entry"]
    _save(hashed, idx)
    got = [p["problem"] for p in _problems(cli, hashed)]
    assert got == [
        "shards[0] (shard.00000.mds): unknown key 'extra'",
        "shards[2] (shard.00002.mds): missing key 'samples'",
        "shards[3] (shard.00003.mds): raw_data: missing key 'bytes'",
        "shards[3] (shard.00003.mds): raw_data: unknown key 'bites' (did you mean 'bytes'?)",
        'shards[4]: expected an object, got ["not", "an", "entry"]',
    ]


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        ("size_limit", "1500", 'size_limit: expected an integer >= 0 or null, got "1500"'),
        ("samples", -1, "samples: expected an integer >= 0, got -1"),
        ("samples", True, "samples: expected an integer >= 0, got true"),
        ("version", 3, "version: expected 2, got 3"),
        ("hashes", "sha1", 'hashes: expected a list of strings, got "sha1"'),
        (
            "column_sizes",
            [8, "x"],
            'column_sizes: expected a list of integers >= 0 or nulls, got [8, "x"]',
        ),
        ("compression", 7, "compression: expected a string or null, got 7"),
        ("zip_data", [], "zip_data: expected an object {basename, bytes, hashes}, got []"),
        (
            "format",
            "parquet",
            'format: unknown shard format "parquet" (one of csv, json, mds, tsv, xsv)',
        ),
    ],
)
def test_wrong_types_are_reported(
    cli: Any, hashed: str, key: str, value: Any, problem: str
) -> None:
    idx = _index(hashed)
    idx["shards"][2][key] = value
    _save(hashed, idx)
    assert _problems(cli, hashed) == [
        {"file": "index.json", "problem": f"shards[2] (shard.00002.mds): {problem}"}
    ]


def test_file_info_types_are_reported(cli: Any, hashed: str) -> None:
    idx = _index(hashed)
    idx["shards"][1]["raw_data"]["bytes"] = "100"
    idx["shards"][1]["raw_data"]["hashes"]["sha1"] = 5
    _save(hashed, idx)
    got = [p["problem"] for p in _problems(cli, hashed)]
    assert got[0] == (
        'shards[1] (shard.00001.mds): raw_data.bytes: expected an integer >= 0, got "100"'
    )
    assert got[1].startswith(
        "shards[1] (shard.00001.mds): raw_data.hashes: expected an object of string digests, "
        'got {"sha1": 5, '
    )
    assert len(got) == 2


def test_parser_rules_are_reported_per_entry(cli: Any, hashed: str) -> None:
    """Well-typed values the format still refuses (the reader's own rules)."""
    idx = _index(hashed)
    idx["shards"][1]["column_encodings"] = ["int", "nope"]
    _save(hashed, idx)
    [p] = _problems(cli, hashed)
    assert p["file"] == "index.json"
    assert p["problem"].startswith("shards[1] (shard.00001.mds): column_encodings[1]: ")
    assert "nope" in p["problem"]


def test_hash_added_to_the_list_is_recomputed(cli: Any, hashed: str) -> None:
    idx = _index(hashed)
    idx["shards"][1]["hashes"] = ["md5", "sha1", "xxh64"]
    _save(hashed, idx)
    md5 = _digest(hashed, "shard.00001.mds", "md5")
    want = [
        {
            "file": "shard.00001.mds",
            "problem": "hashes lists md5, but index.json has no md5 digest of shard.00001.mds "
            f"(the file's is {md5})",
        }
    ]
    assert _problems(cli, hashed) == want
    assert _problems(cli, hashed, "--quick") == want


def test_hash_dropped_from_the_list(cli: Any, hashed: str) -> None:
    idx = _index(hashed)
    idx["shards"][1]["hashes"] = ["sha1"]
    _save(hashed, idx)
    listing = {
        "file": "index.json",
        "problem": "shards[1] (shard.00001.mds): raw_data.hashes has a xxh64 digest, but hashes "
        '["sha1"] does not list xxh64',
    }
    config = {
        "file": "shard.00001.mds",
        "problem": 'shard config hashes ["sha1", "xxh64"] differs from the index ["sha1"]',
    }
    assert _problems(cli, hashed) == [listing, config]
    assert _problems(cli, hashed, "--quick") == [listing]


def test_hash_list_and_digest_changed_together(cli: Any, hashed: str) -> None:
    """The index lists md5 with the file's true md5: only the shard's own config, which
    records the hashes it was written with, tells."""
    idx = _index(hashed)
    e = idx["shards"][2]
    e["hashes"] = ["md5", "sha1", "xxh64"]
    e["raw_data"]["hashes"]["md5"] = _digest(hashed, "shard.00002.mds", "md5")
    _save(hashed, idx)
    assert _problems(cli, hashed) == [
        {
            "file": "shard.00002.mds",
            "problem": 'shard config hashes ["sha1", "xxh64"] differs from the index '
            '["md5", "sha1", "xxh64"]',
        }
    ]


def test_unsupported_hash_algorithm(cli: Any, hashed: str) -> None:
    idx = _index(hashed)
    idx["shards"][0]["hashes"] = ["nothash", "sha1", "xxh64"]
    idx["shards"][1]["raw_data"]["hashes"]["nothash"] = "00"
    _save(hashed, idx)
    got = [p["problem"] for p in _problems(cli, hashed, "--quick")]
    assert got == [
        "shards[0] (shard.00000.mds): hashes: unsupported hash algorithm 'nothash'",
        "shards[1] (shard.00001.mds): raw_data.hashes: unsupported hash algorithm 'nothash'",
    ]


def test_compressed_hash_list_checks_both_files(cli: Any, tmp_path: Any) -> None:
    path = _write(str(tmp_path / "z"), hashes=["sha1"], compression="zstd")
    assert cli("verify", path).code == 0
    idx = _index(path)
    idx["shards"][0]["hashes"] = ["sha1", "sha256"]
    _save(path, idx)
    zname = idx["shards"][0]["zip_data"]["basename"]
    sha = _digest(path, zname, "sha256")
    assert _problems(cli, path, "--quick") == [
        {
            "file": zname,
            "problem": f"hashes lists sha256, but index.json has no sha256 digest of {zname} "
            f"(the file's is {sha})",
        }
    ]


def test_split_format_keys(cli: Any, tmp_path: Any) -> None:
    path = str(tmp_path / "csv")
    with CSVWriter(out=path, columns={"id": "int", "name": "str"}, size_limit=400,
                   hashes=["sha1"]) as w:  # fmt: skip
        for i in range(100):
            w.write({"id": i, "name": f"row {i}"})
    assert cli("verify", path).code == 0
    idx = _index(path)
    idx["shards"][0]["nweline"] = idx["shards"][0].pop("newline")
    idx["shards"][1]["raw_meta"] = None
    _save(path, idx)
    got = [p["problem"] for p in _problems(cli, path)]
    assert got == [
        "shards[0] (shard.00000.csv): missing key 'newline'",
        "shards[0] (shard.00000.csv): unknown key 'nweline' (did you mean 'newline'?)",
        "shards[1] (shard.00001.csv): raw_meta: expected an object {basename, bytes, hashes}, "
        "got null",
    ]


def test_remote_index_is_checked(cli: Any, hashed: str, s3_bucket: str) -> None:
    idx = _index(hashed)
    e = idx["shards"][0]
    e["Xolumn_names"] = e.pop("column_names")
    _save(hashed, idx)
    url = f"{s3_bucket}/schema-{uuid.uuid4().hex[:8]}"
    upload(hashed, url)
    got = [p["problem"] for p in _problems(cli, url)]
    assert got == [
        "shards[0] (shard.00000.mds): missing key 'column_names'",
        "shards[0] (shard.00000.mds): unknown key 'Xolumn_names' (did you mean 'column_names'?)",
    ]


def test_a_file_named_by_two_entries(cli: Any, hashed: str) -> None:
    idx = _index(hashed)
    idx["shards"][2]["raw_data"]["basename"] = "shard.00001.mds"
    _save(hashed, idx)
    assert _problems(cli, hashed) == [
        {"file": "index.json", "problem": "shards[2]: file shard.00001.mds is also shards[1]'s"}
    ]
