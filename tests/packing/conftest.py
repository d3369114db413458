"""A token dataset whose every token names its document and its place in it."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from astream import MDSWriter

STRIDE = 1000  # token = document * STRIDE + index inside the document


def write_tokens(path: str, lengths: list[int], size_limit: int = 3000) -> list[np.ndarray]:
    docs = [np.arange(i * STRIDE, i * STRIDE + n, dtype=np.int32) for i, n in enumerate(lengths)]
    columns = {"input_ids": "ndarray:int32", "doc": "int", "text": "str", "f": "ndarray:float32"}
    with MDSWriter(out=path, columns=columns, size_limit=size_limit) as w:
        for i, d in enumerate(docs):
            w.write({"input_ids": d, "doc": i, "text": " ".join(map(str, d[:3].tolist())),
                     "f": d[:2].astype(np.float32)})  # fmt: skip
    return docs


@pytest.fixture(scope="session")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[np.ndarray]]:
    """301 documents (not a multiple of 2 or 3 ranks: the plan pads) of 1..80 tokens, ~10 shards."""
    rng = np.random.default_rng(7)
    path = str(tmp_path_factory.mktemp("pack") / "tokens")
    return path, write_tokens(path, rng.integers(1, 81, size=301).tolist())


def flat(seqs: list[Any], column: str = "input_ids") -> list[int]:
    """Tokens of sequences (dicts of arrays/tensors, rows or batches), padding (-1 or segment 0)
    left out."""
    out: list[int] = []
    for s in seqs:
        tok = np.asarray(s[column]).reshape(-1)
        seg = np.asarray(s["segment_ids"]).reshape(-1)
        out.extend(tok[seg > 0].tolist())
    return out
