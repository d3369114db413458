#!/usr/bin/env python
"""Regenerate tests/core/golden/mosaic_hashcomp.json from the reference (mosaicml-streaming
0.13.0): the answers of its ``streaming.base.hashing``, ``streaming.base.compression`` and
``streaming.base.distributed`` to the inputs below.

Usage:  python scripts/gen_mosaic_hashcomp_golden.py [--peer-python .venv-ref/bin/python]

``tests/core/test_base_hashcomp.py`` asks astream's ``astream.base`` modules the same; gzip is
left out of the byte comparisons because its header carries the time it was written.
"""

from __future__ import annotations

try:
    import peer  # run as a script: scripts/ is sys.path[0]
except ImportError:  # imported by the tests as scripts.<name>, for its tables
    from scripts import peer

import os
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "core", "golden", "mosaic_hashcomp.json")

HASH_NAMES = ["md5", "sha1", "sha3_256", "blake2b", "xxh3_64", "xxh128", "shake_128", "sha3", ""]
DATA = [b"", b"hello", bytes(range(256)) * 7]
COMP_NAMES = ["br", "br:1", "br:11", "bz2", "bz2:1", "gz", "gz:0", "snappy", "snappy:1", "zstd",
              "zstd:22", "zstd:0", "br:12", "xyz", ""]  # fmt: skip
BYTE_ALGOS = ["br:1", "br", "bz2:3", "snappy", "zstd", "zstd:19"]
CLASSES = ["Brotli", "Bzip2", "Gzip", "Snappy", "Zstandard"]
BAD_DATA: list[Any] = [100, 1.2, "bigdata"]
ENVS: list[dict[str, str]] = [
    {}, {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4"},
    {"WORLD_SIZE": "2"},
]  # fmt: skip


def outcome(fn: Any, *args: Any) -> Any:
    """``fn(*args)`` as JSON: the value (bytes as hex), or the built-in error types it is."""
    try:
        got = fn(*args)
    except Exception as exc:  # the answer is the exception's kind
        kinds = (TypeError, ValueError, AttributeError, RuntimeError, AssertionError, KeyError)
        return {"error": sorted(k.__name__ for k in kinds if isinstance(exc, k))}
    return got.hex() if isinstance(got, bytes) else got


def _with_env(env: dict[str, str], fn: Any) -> Any:
    keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
    saved = {k: os.environ.pop(k) for k in keys if k in os.environ}
    os.environ.update(env)
    try:
        return fn()
    finally:
        for k in keys:
            os.environ.pop(k, None)
        os.environ.update(saved)


def answers(hashing: Any, compression: Any, distributed: Any) -> dict[str, Any]:
    d = distributed
    ranks = [
        _with_env(env, lambda: [d.get_rank(), d.get_world_size(), d.get_local_rank(),
                                d.get_local_world_size(), outcome(d.all_gather_object, 5)])
        for env in ENVS
    ]  # fmt: skip
    classes = {}
    for name in CLASSES:
        cls = getattr(compression, name)
        obj = cls()
        classes[name] = {
            "extension": obj.extension, "levels": list(getattr(obj, "levels", [])),
            "roundtrip": [obj.decompress(obj.compress(b)) == b for b in DATA],
            "bad_data": [outcome(obj.compress, bad) for bad in BAD_DATA],
        }  # fmt: skip
    return {
        "get_hashes": sorted(hashing.get_hashes()),
        "is_hash": [hashing.is_hash(n) for n in HASH_NAMES],
        "get_hash": [[outcome(hashing.get_hash, n, b) for b in DATA] for n in HASH_NAMES],
        "get_compressions": sorted(compression.get_compressions()),
        "is_compression": [compression.is_compression(n) for n in [*COMP_NAMES, None]],
        "extension": [outcome(compression.get_compression_extension, n) for n in COMP_NAMES],
        "compress": [[outcome(compression.compress, a, b) for b in DATA] for a in BYTE_ALGOS],
        "decompress": [
            outcome(compression.decompress, a, compression.compress(a, DATA[2])) == DATA[2].hex()
            for a in [*BYTE_ALGOS, "gz", "gz:1"]
        ],
        "refused": [outcome(f, a, b) for f in (compression.compress, compression.decompress)
                    for a, b in (("br:99", b"x"), ("xyz", b"x"), ("zstd", 100), (None, 100))],
        "classes": classes,
        "ranks": ranks,
        "barrier": outcome(d.barrier),
    }  # fmt: skip


def _inner() -> None:
    from streaming.base import compression, distributed, hashing

    meta = {"reference": "mosaicml-streaming 0.13.0"}
    peer.write_golden(OUT, {**meta, **answers(hashing, compression, distributed)}, indent=1)


if __name__ == "__main__":
    raise SystemExit(peer.main(__file__, __doc__, _inner, pythonpath=[ROOT]))
