"""``astream inspect`` and ``astream verify`` on local and S3 datasets."""

from __future__ import annotations

import json
import os
import uuid

import numpy as np
import pytest

from astream import MDSWriter
from astream.core.hashing import hexdigest
from astream.storage.sync import upload, upload_key

COLUMNS = {"ids": "ndarray:uint16", "label": "int", "text": "str"}


def _write(path: str, n: int = 200, **kw: object) -> list[dict]:
    rng = np.random.default_rng(1)
    samples = [
        {"ids": rng.integers(0, 999, size=5 + i % 7).astype(np.uint16), "label": i, "text": f"t{i}"}
        for i in range(n)
    ]
    with MDSWriter(out=path, columns=COLUMNS, size_limit=2000, **kw) as w:  # type: ignore[arg-type]
        for s in samples:
            w.write(s)
    return samples


@pytest.fixture
def plain(tmp_path):
    path = str(tmp_path / "plain")
    return path, _write(path, hashes=["xxh64"])


def _index(path: str) -> dict:
    with open(os.path.join(path, "index.json")) as f:
        return json.load(f)


def test_inspect_json_describes_the_index(cli, plain):
    path, samples = plain
    r = cli("inspect", path, "--json", "--sample", "17")
    assert r.code == 0, r.err
    info = r.json()
    shards = _index(path)["shards"]
    assert info["samples"] == 200 and info["num_shards"] == len(shards) > 1
    assert info["columns"] == [
        {"name": "ids", "encoding": "ndarray:uint16", "size": None},
        {"name": "label", "encoding": "int", "size": 8},
        {"name": "text", "encoding": "str", "size": None},
    ]
    assert (info["compression"], info["hashes"], info["formats"]) == (["none"], ["xxh64"], ["mds"])
    assert info["raw_bytes"] == sum(s["raw_data"]["bytes"] for s in shards)
    assert [s["basename"] for s in info["shards"]] == [s["raw_data"]["basename"] for s in shards]
    assert info["sample"]["columns"] == {
        "ids": {
            "dtype": "uint16",
            "shape": [len(samples[17]["ids"])],
            "values": samples[17]["ids"].tolist(),
        },
        "label": 17,
        "text": "t17",
    }


def test_inspect_text(cli, plain):
    path, samples = plain
    r = cli("inspect", path, "--sample", "3")
    lines = r.out.splitlines()
    assert lines[0] == f"dataset      {path}"
    assert lines[1].startswith("samples      200 in ") and lines[1].endswith(" shards (mds)")
    assert lines[2] == "columns      ids: ndarray:uint16 (var), label: int (8 B), text: str (var)"
    assert "  label: 3" in lines and "  text: 't3'" in lines
    want = ", ".join(str(x) for x in samples[3]["ids"][:8].tolist())
    assert any(line.startswith("  ids: ndarray uint16 shape") and want in line for line in lines)


def test_inspect_s3_sample_by_range_read(cli, plain, s3_bucket):
    path, _ = plain
    url = f"{s3_bucket}/insp-{uuid.uuid4().hex[:8]}"
    upload(path, url)
    r = cli("inspect", url, "--json", "--sample", "-1")
    assert r.code == 0, r.err
    assert r.json()["sample"]["columns"]["text"] == "t199"


def test_inspect_errors(cli, tmp_path, plain):
    r = cli("inspect", str(tmp_path))
    assert r.code == 2
    assert (
        r.err
        == f"astream: error: no index.json (is this an MDS dataset?) [{tmp_path}/index.json]\n"
    )
    r = cli("inspect", plain[0], "--sample", "200")
    assert r.err == "astream: error: --sample 200 is out of range for 200 samples\n"


def test_verify_clean_then_corrupt_then_missing(cli, plain):
    path, _ = plain
    r = cli("verify", path)
    assert r.code == 0
    n = len(_index(path)["shards"])
    assert r.out.startswith(f"verified {n} shards ({n} files, ") and ": all files match" in r.out
    victim = os.path.join(path, "shard.00001.mds")
    with open(victim, "rb") as f:
        data = bytearray(f.read())
    want = hexdigest("xxh64", bytes(data))
    data[-1] ^= 0xFF
    with open(victim, "wb") as f:
        f.write(data)
    r = cli("verify", path)
    assert r.code == 1
    got = hexdigest("xxh64", bytes(data))
    assert f"MISMATCH shard.00001.mds: xxh64 {got} != {want} in index.json" in r.out.splitlines()
    os.unlink(os.path.join(path, "shard.00002.mds"))
    r = cli("verify", path, "--json")
    assert r.code == 1
    assert r.json()["problems"] == [
        {"file": "shard.00001.mds", "problem": f"xxh64 {got} != {want} in index.json"},
        {"file": "shard.00002.mds", "problem": "missing"},
    ]


def test_verify_compressed_checks_both_files(cli, tmp_path):
    path = str(tmp_path / "z")
    _write(path, compression="zstd", hashes=["sha1"])
    assert cli("verify", path).code == 0
    name = next(n for n in sorted(os.listdir(path)) if n.endswith(".zstd"))
    with open(os.path.join(path, name), "r+b") as f:
        f.truncate(os.path.getsize(os.path.join(path, name)) - 3)
    r = cli("verify", path, "--json")
    assert r.code == 1
    [p] = r.json()["problems"]
    assert p["file"] == name and p["problem"].startswith("size ")


def test_verify_without_hashes_says_so(cli, tmp_path):
    path = str(tmp_path / "nh")
    _write(path)
    r = cli("verify", path)
    assert r.code == 0
    assert r.out.splitlines()[-1] == (
        "note: index.json lists no hashes; only sizes, structure and decoding were checked"
    )
    r = cli("verify", path, "--quick")
    assert r.code == 0
    assert r.out.splitlines()[-1] == (
        "note: index.json lists no hashes; only sizes (and decompression) were checked"
    )


def _patch(path: str, at: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(data)


def _offsets(path: str) -> list[int]:
    with open(path, "rb") as f:
        raw = f.read()
    n = int.from_bytes(raw[:4], "little")
    return [int.from_bytes(raw[4 + 4 * k : 8 + 4 * k], "little") for k in range(n + 1)]


def test_verify_without_hashes_finds_a_flipped_header_byte(cli, tmp_path):
    # no hashes listed: before, "all files match" and exit 0 for a dataset that cannot be read
    path = str(tmp_path / "nh")
    _write(path)
    victim = os.path.join(path, "shard.00001.mds")
    off = _offsets(victim)
    # offset of sample 5 grows past sample 6's: the reader raises FormatError on this shard
    _patch(victim, 4 + 4 * 5, (off[6] + 1).to_bytes(4, "little"))
    r = cli("verify", path)
    assert r.code == 1
    assert (
        f"MISMATCH shard.00001.mds: sample offsets out of order at sample 5: {off[6] + 1} > "
        f"{off[6]}" in r.out.splitlines()
    )
    assert r.out.splitlines()[-2].endswith(": 1 problem(s)")
    # --quick checks sizes and hashes only, and says so
    assert cli("verify", path, "--quick").code == 0
    # reading it fails the same way
    from astream.errors import FormatError
    from astream.local import LocalDataset

    with pytest.raises(FormatError, match="sample offsets out of order at sample 5"):
        LocalDataset(path)[_index(path)["shards"][0]["samples"] + 5]


def test_verify_structure_problems_name_file_and_sample(cli, tmp_path):
    path = str(tmp_path / "nh")
    _write(path)
    victim = os.path.join(path, "shard.00002.mds")
    off = _offsets(victim)
    n = len(off) - 1
    with open(victim, "rb") as f:
        raw = bytearray(f.read())
    # sample 3's text column "tNN" is the last bytes of the sample: make it invalid UTF-8
    raw[off[4] - 1] = 0xFF
    with open(victim, "wb") as f:
        f.write(raw)
    r = cli("verify", path, "--json")
    assert r.code == 1
    [p] = r.json()["problems"]
    assert p["file"] == "shard.00002.mds"
    assert p["problem"].startswith("sample 3: column 'text': cannot decode value (")
    assert r.json()["structure_checked"] is True
    # header sample count against the index
    raw[off[4] - 1] = ord("0")
    raw[0:4] = (n + 1).to_bytes(4, "little")
    with open(victim, "wb") as f:
        f.write(raw)
    r = cli("verify", path)
    assert r.code == 1
    assert f"MISMATCH shard.00002.mds: shard header says {n + 1} samples, index says {n}" in (
        r.out.splitlines()
    )
    # the last offset pointing past the end of the file
    raw[0:4] = n.to_bytes(4, "little")
    raw[4 + 4 * n : 8 + 4 * n] = (off[n] + 7).to_bytes(4, "little")
    with open(victim, "wb") as f:
        f.write(raw)
    r = cli("verify", path, "--json")
    [p] = r.json()["problems"]
    assert p == {
        "file": "shard.00002.mds",
        "problem": f"last sample offset {off[n] + 7} does not match file size {off[n]} "
        "(truncated?)",
    }
    assert cli("verify", path, "--quick").code == 0


def test_verify_decodes_compressed_shards_after_decompression(cli, tmp_path):
    # sizes and hashes of the zstd file and of its decompressed bytes are consistent (the index
    # is rewritten to match), but a sample inside does not decode
    import zstandard

    path = str(tmp_path / "z")
    _write(path, compression="zstd")
    idx = _index(path)
    s = idx["shards"][1]
    zname = s["zip_data"]["basename"]
    with open(os.path.join(path, zname), "rb") as f:
        plain = bytearray(zstandard.ZstdDecompressor().decompress(f.read()))
    n = int.from_bytes(plain[:4], "little")
    plain[0:4] = (n - 1).to_bytes(4, "little")
    comp = zstandard.ZstdCompressor().compress(bytes(plain))
    with open(os.path.join(path, zname), "wb") as f:
        f.write(comp)
    s["zip_data"]["bytes"] = len(comp)
    with open(os.path.join(path, "index.json"), "w") as f:
        json.dump(idx, f)
    r = cli("verify", path, "--json")
    assert r.code == 1
    assert r.json()["problems"] == [
        {"file": zname, "problem": f"shard header says {n - 1} samples, index says {n}"}
    ]
    assert cli("verify", path, "--quick").code == 0


def test_verify_s3(cli, plain, s3_bucket, tmp_path):
    path, _ = plain
    url = f"{s3_bucket}/ver-{uuid.uuid4().hex[:8]}"
    upload(path, url)
    assert cli("verify", url, "--concurrency", "3").code == 0
    bad = tmp_path / "bad"
    bad.write_bytes(b"\0" * os.path.getsize(os.path.join(path, "shard.00000.mds")))
    upload_key(str(bad), url, "shard.00000.mds")
    r = cli("verify", url, "--json")
    assert r.code == 1
    [p] = r.json()["problems"]
    assert p["file"] == "shard.00000.mds" and p["problem"].startswith("xxh64 ")
    r = cli("verify", url, "--concurrency", "0")
    assert r.err == "astream: error: --concurrency must be >= 1, got 0\n"


GOLDEN = os.path.join(os.path.dirname(os.path.dirname(__file__)), "golden", "data")


@pytest.mark.parametrize(
    "name",
    sorted(n for n in os.listdir(GOLDEN) if os.path.isfile(os.path.join(GOLDEN, n, "index.json"))),
)
def test_reference_written_datasets_verify_and_inspect(cli, name):
    # datasets written by mosaicml-streaming 0.13.0 (tests/golden): every format, compression,
    # merged sub-datasets, split formats with meta files
    path = os.path.join(GOLDEN, name)
    unsafe = ["--allow-unsafe-types"] if name == "encodings" else []
    r = cli("verify", path, "--json", *unsafe)
    assert r.code == 0, r.out
    assert r.json()["structure_checked"] is True
    with open(os.path.join(path, "index.json")) as f:
        shards = json.load(f)["shards"]
    want_files = sum(2 if "raw_meta" in s else 1 for s in shards)
    assert r.json()["files_checked"] == want_files and r.json()["problems"] == []
    info = cli("inspect", path, "--json", "--sample", "0", *unsafe).json()
    assert info["samples"] == sum(s["samples"] for s in shards)
    assert info["sample"]["index"] == 0


def test_inspect_refuses_pickle_unless_allowed(cli):
    path = os.path.join(GOLDEN, "encodings")
    r = cli("inspect", path, "--sample", "0")
    assert r.code == 2
    assert r.err == (
        f"astream: error: {path}/shard.00000.mds: column 'obj_pkl' contains an unsafe type: "
        "encoding 'pkl' (pickle can run code); pass allow_unsafe_types=True to read it\n"
    )
    r = cli("inspect", path, "--sample", "0", "--allow-unsafe-types")
    assert r.code == 0 and "  obj_pkl: " in r.out
    r = cli("verify", path)
    assert r.code == 0
    n = len(_index(path)["shards"])
    assert r.out.splitlines()[-1] == (
        f"note: {n} shard(s) have pkl columns, not decoded "
        "(pass --allow-unsafe-types to decode them)"
    )
