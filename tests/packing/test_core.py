"""The pure packer and stream layout (astream/core/token_packer.py), against naive references."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from astream.core.order import StreamSpec, plan_epoch
from astream.core.token_packer import PackSpec, StreamLayout, check_pack, pack_tokens, token_dtype
from astream.core.world import World
from astream.errors import ConfigError


def naive(docs: list[np.ndarray], seq_len: int, last: str, pad_id: int) -> list[dict[str, Any]]:
    """Concatenate, then split: tokens, in-document positions, per-sequence segment numbers."""
    if not docs:
        return []
    tokens = np.concatenate(docs)
    positions = np.concatenate([np.arange(len(d)) for d in docs])
    doc_of = np.concatenate([np.full(len(d), i) for i, d in enumerate(docs)])
    out = []
    for lo in range(0, len(tokens), seq_len):
        t, p, d = tokens[lo : lo + seq_len], positions[lo : lo + seq_len], doc_of[lo : lo + seq_len]
        if len(t) < seq_len and last == "drop":
            break
        seg = np.cumsum(np.r_[1, (d[1:] != d[:-1]).astype(int)]) if len(d) else d
        fill = seq_len - len(t)
        out.append({
            "tok": np.r_[t, np.full(fill, pad_id)],
            "pos": np.r_[p, np.zeros(fill, int)],
            "seg": np.r_[seg, np.zeros(fill, int)],
        })  # fmt: skip
    return out


def docs_strategy() -> Any:
    return st.lists(st.integers(0, 40), min_size=0, max_size=40).map(
        lambda lens: [np.arange(1000 * i, 1000 * i + n, dtype=np.int32) for i, n in enumerate(lens)]
    )


@settings(max_examples=300, deadline=None)
@given(
    docs=docs_strategy(),
    seq_len=st.integers(1, 50),
    last=st.sampled_from(["pad", "drop"]),
    chunk=st.integers(1, 200),
)
def test_pack_equals_concatenate_and_split(
    docs: list[np.ndarray], seq_len: int, last: str, chunk: int
) -> None:
    """Whatever the chunk of tokens gathered before cutting (``chunk_tokens``)."""
    spec = PackSpec(seq_len, "ids", last, -1)
    got = list(pack_tokens(iter(docs), spec, np.dtype(np.int32), chunk_tokens=chunk))
    want = naive(docs, seq_len, last, -1)
    assert len(got) == len(want)
    for (item, _), w in zip(got, want):
        assert item["ids"].dtype == np.int32 and item["position_ids"].dtype == np.int64
        assert item["ids"].tolist() == w["tok"].tolist()
        assert item["position_ids"].tolist() == w["pos"].tolist()
        assert item["segment_ids"].tolist() == w["seg"].tolist()


@settings(max_examples=300, deadline=None)
@given(docs=docs_strategy(), seq_len=st.integers(1, 50), chunk=st.integers(1, 200), data=st.data())
def test_resume_at_any_sequence_is_the_suffix(
    docs: list[np.ndarray], seq_len: int, chunk: int, data: Any
) -> None:
    spec = PackSpec(seq_len, "ids", "pad", 0)
    full = list(pack_tokens(iter(docs), spec, None, chunk_tokens=chunk))
    k = data.draw(st.integers(1, max(1, len(full))))
    if k > len(full):
        return
    samples, offset = full[k - 1][1]
    chunk2 = data.draw(st.integers(1, 200))
    rest = list(
        pack_tokens(
            iter(docs[samples:]), spec, None, samples=samples, offset=offset, chunk_tokens=chunk2
        )
    )
    assert len(rest) == len(full) - k
    for (a, ca), (b, cb) in zip(rest, full[k:]):
        assert ca == cb
        for key in ("ids", "position_ids", "segment_ids"):
            assert a[key].tolist() == b[key].tolist()


def test_cursor_and_errors() -> None:
    spec = PackSpec(4, "ids", "pad", 0)
    docs = [np.arange(3), np.arange(5), np.arange(4)]
    cursors = [c for _, c in pack_tokens(iter(docs), spec, None)]
    assert cursors == [(1, 1), (2, 0), (3, 0)]
    with pytest.raises(ConfigError, match="token offset 7 is past"):
        list(pack_tokens(iter([np.arange(5)]), spec, None, samples=3, offset=7))
    with pytest.raises(ConfigError, match="1-D array of integer"):
        list(pack_tokens(iter([np.zeros(3, np.float32)]), spec, None))
    with pytest.raises(ConfigError, match="1-D array of integer"):
        list(pack_tokens(iter([np.zeros((2, 2), np.int64)]), spec, None))


def test_check_pack_names_the_argument() -> None:
    assert check_pack(None, "input_ids", "pad", 0) is None
    for args, name in (
        ((None, "ids", "pad", 0), "pack_column"),
        ((None, "input_ids", "drop", 0), "pack_last"),
        ((None, "input_ids", "pad", 5), "pack_pad_id"),
        ((0, "ids", "pad", 0), "pack_to"),
        ((True, "ids", "pad", 0), "pack_to"),
        ((8, "", "pad", 0), "pack_column"),
        ((8, "position_ids", "pad", 0), "pack_column"),
        ((8, "ids", "truncate", 0), "pack_last"),
        ((8, "ids", "pad", 1.5), "pack_pad_id"),
    ):
        with pytest.raises(ConfigError, match=name):
            check_pack(*args)
    spec = PackSpec(8, "ids", "pad", 70000)
    with pytest.raises(ConfigError, match="pack_pad_id=70000 does not fit"):
        token_dtype([("s0", "ndarray:uint16")], spec)
    spec = PackSpec(8, "ids", "pad", 0)
    assert token_dtype([("s0", "ndarray:uint16"), ("s1", "ndarray:uint16:7")], spec) == np.uint16
    assert token_dtype([("s0", "ndarray")], spec) is None
    for enc, words in (
        ("str", "integer array column"),
        ("int", "integer array column"),
        ("ndarray:float32", "not integers"),
        ("ndarray:int32:4,4", "more than one dimension"),
    ):
        with pytest.raises(ConfigError, match=words):
            token_dtype([("s0", enc)], spec)
    with pytest.raises(ConfigError, match="different dtypes"):
        token_dtype([("s0", "ndarray:int32"), ("s1", "ndarray:int64")], spec)


@settings(max_examples=150, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 30), min_size=1, max_size=6),
    nodes=st.integers(1, 2),
    rpn=st.integers(1, 3),
    workers=st.integers(1, 3),
    bs=st.integers(1, 5),
    shuffle=st.booleans(),
    data=st.data(),
)
def test_streams_cover_the_epoch_once(
    sizes: list[int], nodes: int, rpn: int, workers: int, bs: int, shuffle: bool, data: Any
) -> None:
    """Over every consumer of a World, the packed streams (the planned batches less the pad)
    hold each position from ``start`` exactly once, and ``position(i)`` is the i-th of them."""
    plan = plan_epoch([StreamSpec(np.array(sizes))], seed=3, epoch=0, num_canonical_nodes=1,
                      batch_size=bs, shuffle=shuffle)  # fmt: skip
    start = data.draw(st.integers(0, plan.num_samples))
    world = World(nodes, rpn, workers)
    # an unshuffled epoch is the reference's: its layout widens when physical nodes outnumber
    # canonical ones, and a resume rounds down to a multiple of the nodes
    first, n = plan.dealt_span(world, start)
    assert first <= start and (shuffle or first % nodes == 0)
    ids_at = plan.global_ids(0, n)
    seen: list[int] = []
    for g in range(world.num_ranks):
        for w in range(workers):
            lay = StreamLayout(plan, world, g, w, start)
            ids = [int(x) for b in plan.worker_batches(world, g, w, start) for x in b]
            assert len(ids) - lay.length == int(lay.has_pad) and lay.length >= 0
            pos = [lay.position(i) for i in range(lay.length)]
            assert [int(ids_at[p]) for p in pos] == ids[: lay.length]
            assert lay.position(lay.length) == n
            seen.extend(pos)
    assert sorted(seen) == list(range(first, n))
