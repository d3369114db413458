"""The generated sample decoder reads 1-D ``ndarray:DTYPE`` values in place (``shard._one_dim``):
every value and every error equal those of the coder it bypasses (the decoder generated
without the in-place read), over all count widths, other shapes and corrupted bytes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import astream.core.shard as shard
from astream.core.index import FileInfo, ShardEntry
from astream.core.shard import SampleDecoder, SampleEncoder
from astream.errors import FormatError

COLS = {"a": "ndarray:uint16", "b": "ndarray:float32", "n": "int", "z": "ndarray:int8"}


def _entry() -> ShardEntry:
    enc = SampleEncoder(COLS)
    return ShardEntry(
        format="mds", column_encodings=enc.encodings, column_names=enc.names,
        column_sizes=enc.sizes, compression=None, hashes=[],
        raw_data=FileInfo("shard.00000.mds", 1, {}), zip_data=None, samples=1,
        size_limit=1 << 26,
    )  # fmt: skip


def _decoders(monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    fast = SampleDecoder(_entry(), False, "t.mds").decode
    monkeypatch.setattr(shard, "_one_dim", lambda enc: None)  # the coder for every value
    slow = SampleDecoder(_entry(), False, "t.mds").decode
    monkeypatch.undo()
    return fast, slow


def _outcome(dec: Any, raw: bytes) -> Any:
    try:
        got = dec(memoryview(raw))
    except FormatError as exc:
        return ("error", str(exc))
    return {k: (v.dtype.str, v.shape, v.tobytes()) if hasattr(v, "dtype") else v
            for k, v in got.items()}  # fmt: skip


def test_values_of_every_count_width(monkeypatch: pytest.MonkeyPatch) -> None:
    fast, slow = _decoders(monkeypatch)
    calls: list[str] = []
    real = shard.get_coder

    def spy(enc: str) -> Any:  # counts the values the coder decodes
        c = real(enc)
        return type(c)(c.name, c.size, c.encode, lambda mv: (calls.append(enc), c.decode(mv))[1])

    monkeypatch.setattr(shard, "get_coder", spy)
    counted = SampleDecoder(_entry(), False, "t.mds").decode
    monkeypatch.undo()
    enc = SampleEncoder(COLS)
    rng = np.random.default_rng(2)
    for n in (1, 2, 3, 255, 256, 65535, 65536, 70_000):
        s = {
            "a": rng.integers(0, 2**16, n).astype(np.uint16),
            "b": rng.random(max(1, n // 7)).astype(np.float32),
            "n": n,
            "z": rng.integers(-128, 128, (2, 3)).astype(np.int8),  # 2-D: the coder's path
        }
        raw = enc.encode(s)
        got = fast(memoryview(raw))
        assert got["a"].dtype == np.uint16 and np.array_equal(got["a"], s["a"])
        assert np.array_equal(got["b"], s["b"]) and got["n"] == n
        assert got["z"].shape == (2, 3) and np.array_equal(got["z"], s["z"])
        assert _outcome(fast, raw) == _outcome(slow, raw)
        calls.clear()
        counted(memoryview(raw))
        # only the 2-D value went through its coder (and a value under 6 bytes: n == 1)
        assert calls == (["ndarray:int8"] if n > 1 else ["ndarray:uint16", "ndarray:int8"])


def test_corrupt_values_fail_as_the_coder_does(monkeypatch: pytest.MonkeyPatch) -> None:
    fast, slow = _decoders(monkeypatch)
    enc = SampleEncoder(COLS)
    rng = np.random.default_rng(3)
    errors = 0
    for trial in range(3000):
        n = int(rng.choice([1, 2, 3, 5, 300, 70_000]))
        s = {
            "a": np.arange(n, dtype=np.uint16),
            "b": np.ones(int(rng.integers(1, 4)), np.float32),
            "n": trial,
            "z": np.zeros(int(rng.integers(1, 9)), np.int8),
        }
        raw = bytearray(enc.encode(s))
        for _ in range(int(rng.integers(1, 4))):  # the length fields and the array headers
            i = int(rng.integers(0, min(len(raw), 40)))
            raw[i] = int(rng.integers(0, 256))
        want = _outcome(slow, bytes(raw))
        assert _outcome(fast, bytes(raw)) == want
        errors += want[0] == "error" if isinstance(want, tuple) else 0
    assert errors > 300  # the mutations do reach the error paths
