"""Deterministic sample generators and fixture specs shared by scripts/gen_golden.py and tests.

Plain numpy / stdlib / PIL only: this module runs both in astream's venv and in the throwaway
venv that has mosaicml-streaming (the reference writer), so it imports neither library.
"""

from __future__ import annotations

from decimal import Decimal
from io import BytesIO
from typing import Any

import numpy as np
from PIL import Image

SCALARS = ["uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64",
           "float16", "float32", "float64"]  # fmt: skip

ALL_COLUMNS: dict[str, str] = {
    "a_bytes": "bytes",
    "a_str": "str",
    "a_int": "int",
    "nd_dyn": "ndarray",
    "nd_dtype": "ndarray:int16",
    "nd_fixed": "ndarray:float32:2,3",
    **{f"s_{t}": t for t in SCALARS},
    "str_int": "str_int",
    "str_float": "str_float",
    "str_decimal": "str_decimal",
    "img_pil": "pil",
    "img_jpeg": "jpeg",
    "img_jpeg_array": "jpeg_array",
    "img_jpegarray": "jpegarray",
    "img_png": "png",
    "list_pil": "list[pil]",
    "list_jpeg": "list[jpeg]",
    "list_png": "list[png]",
    "obj_pkl": "pkl",
    "obj_json": "json",
}
TOKEN_COLUMNS = {"tokens": "ndarray:uint16", "label": "int", "text": "str"}
SPLIT_COLUMNS = {"id": "int", "name": "str", "score": "float"}

_ND_DTYPES = ["uint8", "int8", "uint16", "int16", "float16", "uint32", "int32", "float32",
              "uint64", "int64", "float64"]  # fmt: skip


def _image(rng: np.random.Generator, mode: str = "RGB") -> Image.Image:
    h, w = int(rng.integers(2, 9)), int(rng.integers(2, 9))
    chans = {"RGB": 3, "L": 1, "RGBA": 4}[mode]
    arr = rng.integers(0, 256, (h, w, chans), dtype=np.uint8)
    return Image.fromarray(arr[:, :, 0] if chans == 1 else arr, mode)


def jpeg_bytes(img: Image.Image) -> bytes:
    out = BytesIO()
    img.save(out, format="JPEG")
    return out.getvalue()


def all_encodings(n: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        dt = _ND_DTYPES[i % len(_ND_DTYPES)]
        shape = [(3,), (2, 5), (1, 300), (2, 1, 3)][i % 4]
        s: dict[str, Any] = {
            "a_bytes": bytes(rng.integers(0, 256, int(rng.integers(0, 20)), dtype=np.uint8)),
            "a_str": ["", "héllo", "日本語", "a\nb\tc"][i % 4] * (i % 3 + 1),
            "a_int": [0, -1, (1 << 63) - 1, -(1 << 63), 12345678901][i % 5],
            "nd_dyn": (rng.standard_normal(shape) * 100).astype(dt),
            "nd_dtype": rng.integers(-30000, 30000, (i % 4 + 1, 2), dtype=np.int16),
            "nd_fixed": rng.standard_normal((2, 3)).astype(np.float32),
            "str_int": [0, -7, 10**30, 42][i % 4],
            "str_float": [0.1, -1e300, 3.5, float("inf")][i % 4],
            "str_decimal": Decimal(["3.14159265358979323846", "-0.0001", "1E+5", "7"][i % 4]),
            "img_pil": _image(rng, ["RGB", "L", "RGBA"][i % 3]),
            "img_jpeg": _image(rng),
            "img_jpeg_array": [jpeg_bytes(_image(rng)) for _ in range(i % 3 + 1)],
            "img_jpegarray": [jpeg_bytes(_image(rng)) for _ in range(1 + i % 2)],
            "img_png": _image(rng, ["RGB", "L", "RGBA"][i % 3]),
            "list_pil": [_image(rng) for _ in range(i % 3)],
            "list_jpeg": [_image(rng) for _ in range(1 + i % 2)],
            "list_png": [_image(rng, "L") for _ in range(i % 3)],
            "obj_pkl": {"i": i, "t": (1, "x"), "s": {i}, "n": None},
            "obj_json": {"i": i, "l": [1, 2.5, "x", None, True], "d": {"k": "v"}},
        }
        for t in SCALARS:
            info = np.finfo(t) if t.startswith("float") else np.iinfo(t)
            pick = [info.min, info.max, 0, 1][i % 4] if i % 5 else rng.integers(0, 100)
            s[f"s_{t}"] = np.dtype(t).type(pick)
        out.append(s)
    return out


def tokens(n: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        length = int(rng.integers(1, 60))
        out.append(
            {
                "tokens": rng.integers(0, 65535, length, dtype=np.uint16),
                "label": int(rng.integers(-1000, 1000)),
                "text": f"sample {seed}:{i} " + "x" * int(rng.integers(0, 30)),
            }
        )
    return out


def oversized_first(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """First sample bigger than the 256-byte size limit: the reference writes an empty shard."""
    rows = tokens(n, seed)
    rows[0]["tokens"] = np.arange(400, dtype=np.uint16)
    return rows


def split_rows(n: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    return [
        {"id": i * 7 - 20, "name": f"row{i}_" + "ab" * int(rng.integers(0, 5)),
         "score": float(np.round(rng.standard_normal(), 6))}
        for i in range(n)
    ]  # fmt: skip


EXACT_LIMIT = 1000  # size_limit of the exact_limit fixture


def exact_limit_config_len(limit: int = EXACT_LIMIT) -> int:
    """Bytes of the shard config JSON of the exact_limit fixture (as both writers write it)."""
    import json

    config = {
        "column_encodings": ["bytes"],
        "column_names": ["blob"],
        "column_sizes": [None],
        "compression": None,
        "format": "mds",
        "hashes": ["sha1"],
        "size_limit": limit,
        "version": 2,
    }
    return len(json.dumps(config, sort_keys=True))


def exact_limit(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """Shards whose bytes land exactly on ``size_limit``, and one byte over it, alternately.

    One ``bytes`` column: a sample costs its length + 4 (length prefix) + 4 (its offset); a
    shard costs 8 + the config JSON + its samples. Each group is ten 50-byte samples and a
    filler sized so that the shard is exactly ``EXACT_LIMIT`` bytes (even groups: it fits, the
    limit is not exceeded) or one byte more (odd groups: the filler starts the next shard).
    ``n`` is the number of groups."""
    rng = np.random.default_rng(seed)
    room = EXACT_LIMIT - 8 - exact_limit_config_len()
    out: list[dict[str, Any]] = []
    for g in range(n):
        for _ in range(10):
            out.append({"blob": rng.bytes(50)})
        filler = room - 10 * 58 - 8 + (g % 2)
        out.append({"blob": rng.bytes(filler)})
    return out


GENERATORS = {
    "exact_limit": exact_limit,
    "all_encodings": all_encodings,
    "tokens": tokens,
    "oversized_first": oversized_first,
    "split_rows": split_rows,
}

# name -> writer spec. "writer": mds | json | csv | tsv. byte_identical: astream must reproduce
# every file byte for byte (all but gz, whose header embeds the time).
SPECS: dict[str, dict[str, Any]] = {
    "encodings": dict(gen="all_encodings", n=12, seed=1, columns=ALL_COLUMNS, compression=None,
                      hashes=["sha1", "xxh64"], size_limit=6000),
    "zstd": dict(gen="tokens", n=40, seed=2, columns=TOKEN_COLUMNS, compression="zstd",
                 hashes=["md5"], size_limit=2048),
    "zstd_7": dict(gen="tokens", n=40, seed=3, columns=TOKEN_COLUMNS, compression="zstd:7",
                   hashes=["sha256", "xxh3_64"], size_limit=2048),
    "gz_1": dict(gen="tokens", n=40, seed=4, columns=TOKEN_COLUMNS, compression="gz:1",
                 hashes=["blake2b"], size_limit=2048),
    "bz2_3": dict(gen="tokens", n=40, seed=5, columns=TOKEN_COLUMNS, compression="bz2:3",
                  hashes=["sha3_256", "xxh128"], size_limit=2048),
    "br_5": dict(gen="tokens", n=40, seed=6, columns=TOKEN_COLUMNS, compression="br:5",
                 hashes=["sha512", "xxh32"], size_limit=2048),
    "snappy": dict(gen="tokens", n=40, seed=7, columns=TOKEN_COLUMNS, compression="snappy",
                   hashes=["xxh3_128"], size_limit=2048),
    "multishard": dict(gen="tokens", n=60, seed=8, columns=TOKEN_COLUMNS, compression=None,
                       hashes=["blake2s", "md5", "sha1", "sha224", "sha384", "xxh64"],
                       size_limit="1kb"),
    "oversized_first": dict(gen="oversized_first", n=10, seed=9, columns=TOKEN_COLUMNS,
                            compression=None, hashes=[], size_limit=256),
    "merged/part0": dict(gen="tokens", n=15, seed=10, columns=TOKEN_COLUMNS, compression=None,
                         hashes=["sha1"], size_limit=1024),
    "merged/part1": dict(gen="tokens", n=12, seed=11, columns=TOKEN_COLUMNS, compression="zstd",
                         hashes=["sha1"], size_limit=1024),
    "json": dict(writer="json", gen="split_rows", n=30, seed=12, columns=SPLIT_COLUMNS,
                 compression=None, hashes=["sha1"], size_limit=600),
    "csv": dict(writer="csv", gen="split_rows", n=30, seed=13, columns=SPLIT_COLUMNS,
                compression=None, hashes=["sha1"], size_limit=600),
    "exact_limit": dict(gen="exact_limit", n=4, seed=15, columns={"blob": "bytes"},
                        compression=None, hashes=["sha1"], size_limit=EXACT_LIMIT),
    "tsv_zstd": dict(writer="tsv", gen="split_rows", n=20, seed=14, columns=SPLIT_COLUMNS,
                     compression="zstd:3", hashes=[], size_limit=None),
}  # fmt: skip
MERGED_PARTS = ["merged/part0", "merged/part1"]


def samples_for(name: str) -> list[dict[str, Any]]:
    spec = SPECS[name]
    return GENERATORS[spec["gen"]](spec["n"], spec["seed"])


def expected_value(encoding: str, value: Any) -> Any:
    """What a reader must return for ``value`` written with ``encoding``."""
    if encoding == "jpeg":
        return Image.open(BytesIO(jpeg_bytes(value)))
    if encoding == "list[jpeg]":
        return [Image.open(BytesIO(jpeg_bytes(v))) for v in value]
    if encoding in ("jpeg_array", "jpegarray"):
        return [Image.open(BytesIO(v)) for v in value]
    if encoding.startswith("ndarray"):
        return np.asarray(value)
    return value


def assert_same(got: Any, want: Any, where: str = "") -> None:
    """Exact equality including types; images by mode, size and pixels."""
    if isinstance(want, Image.Image):
        assert isinstance(got, Image.Image), where
        assert (got.mode, got.size) == (want.mode, want.size), where
        assert got.tobytes() == want.tobytes(), where
        return
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), where
        for k, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{where}[{k}]")
        return
    if isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray), where
        assert got.dtype == want.dtype and got.shape == want.shape, where
        assert got.tobytes() == want.tobytes(), where
        assert not got.flags.writeable, f"{where}: arrays must be read-only"
        return
    assert type(got) is type(want), f"{where}: {type(got)} != {type(want)}"
    if isinstance(want, (np.floating, float)) and want != want:
        assert got != got, where
        return
    assert got == want, f"{where}: {got!r} != {want!r}"
