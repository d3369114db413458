"""pack_to on real MDS data: the sample path's order packed, DataLoader workers, exact resume,
resume on another World, batch output, errors."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from astream import StreamingDataLoader, StreamingDataset
from astream.errors import ConfigError
from astream.packing import merge_states

from .conftest import STRIDE, flat, write_tokens
from .test_core import naive

OPTS: dict[str, Any] = {"shuffle": True, "shuffle_seed": 5, "shuffle_block_size": 64}


def make(path: str, seq_len: int = 64, bs: int = 4, **kw: Any) -> StreamingDataset:
    return StreamingDataset(local=path, batch_size=bs, pack_to=seq_len, **{**OPTS, **kw})


def sample_docs(path: str, bs: int = 4, **kw: Any) -> list[np.ndarray]:
    """The sample path's documents, in its order (no packing)."""
    ds = StreamingDataset(local=path, batch_size=bs, **{**OPTS, **kw})
    return [s["input_ids"] for s in ds]


def same(a: list[Any], b: list[Any]) -> bool:
    keys = ("input_ids", "position_ids", "segment_ids")
    return len(a) == len(b) and all(
        np.array_equal(np.asarray(x[k]), np.asarray(y[k])) for x, y in zip(a, b) for k in keys
    )


def run(loader: Any, n: int | None = None) -> list[dict[str, np.ndarray]]:
    out = []
    for b in loader:
        out.append({k: np.asarray(v).copy() for k, v in b.items()})
        if n is not None and len(out) == n:
            break
    return out


def test_sample_path_packed_as_concatenate_and_split(tokens: Any) -> None:
    path, docs = tokens
    order = sample_docs(path)
    assert sorted(int(d[0]) for d in order) == [i * STRIDE for i in range(len(docs))]
    for seq_len in (1, 13, 64, 5000):
        got = list(make(path, seq_len))
        want = naive(order, seq_len, "pad", 0)
        assert [g["input_ids"].tolist() for g in got] == [w["tok"].tolist() for w in want]
        assert [g["position_ids"].tolist() for g in got] == [w["pos"].tolist() for w in want]
        assert [g["segment_ids"].tolist() for g in got] == [w["seg"].tolist() for w in want]
    dropped = list(make(path, 64, pack_last="drop", pack_pad_id=-1))
    assert len(dropped) == sum(map(len, docs)) // 64
    padded = list(make(path, 64, pack_pad_id=-1))
    assert (padded[-1]["input_ids"] == -1).sum() == (padded[-1]["segment_ids"] == 0).sum() > 0


@settings(max_examples=12, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 50), min_size=1, max_size=60),
    seq_len=st.integers(1, 70),
    bs=st.integers(1, 6),
    k=st.integers(0, 40),
)
def test_random_documents_and_resume(
    tmp_path_factory: pytest.TempPathFactory, lengths: list[int], seq_len: int, bs: int, k: int
) -> None:
    """Over random document lengths, seq_len and batch size: the packed sequences are the
    naive concatenate-and-split of the sample path's output, and a dataset resumed from the
    state after k sequences yields exactly the rest."""
    path = str(tmp_path_factory.mktemp("rand") / "d")
    write_tokens(path, lengths, size_limit=400)
    full = list(make(path, seq_len, bs))
    want = naive(sample_docs(path, bs), seq_len, "pad", 0)
    assert [g["input_ids"].tolist() for g in full] == [w["tok"].tolist() for w in want]
    k = min(k, len(full))
    ds = make(path, seq_len, bs)
    it = iter(ds)
    head = [next(it) for _ in range(k)]
    state = ds.state_dict()
    again = make(path, seq_len, bs)
    again.load_state_dict(state)
    assert same(head + list(again), full)


@pytest.mark.parametrize("workers,persistent", [(0, False), (2, False), (2, True)])
def test_loader_resume_exact(tokens: Any, workers: int, persistent: bool) -> None:
    """StreamingDataLoader, 0 or 2 workers: the state after k batches resumes with exactly the
    remaining batches, in the same order, including after a worker's stream ran out."""
    path, docs = tokens
    kw = {"batch_size": 3, "num_workers": workers, "persistent_workers": persistent}
    full = run(StreamingDataLoader(make(path, 32), **kw))
    assert sorted(flat(full)) == sorted(t for d in docs for t in d.tolist())
    for k in (1, len(full) // 2 + 1, len(full) - 1):
        loader = StreamingDataLoader(make(path, 32), **kw)
        head = run(loader, k)
        state = loader.state_dict()
        if persistent:  # the same loader, its workers still alive, resumes
            loader.load_state_dict(state)
            rest = run(loader)
        else:
            again = StreamingDataLoader(make(path, 32), **kw)
            again.load_state_dict(state)
            rest = run(again)
        assert same(head + rest, full), k
    # a checkpoint of a resumed run (its workers on rotated streams) resumes exactly too
    loader = StreamingDataLoader(make(path, 32), **kw)
    head = run(loader, 3)
    second = StreamingDataLoader(make(path, 32), **kw)
    second.load_state_dict(loader.state_dict())
    middle = run(second, 4)
    third = StreamingDataLoader(make(path, 32), **kw)
    third.load_state_dict(second.state_dict())
    assert same(head + middle + run(third), full)
    done = StreamingDataLoader(make(path, 32), **kw)
    run(done)
    assert done.state_dict()["epoch"] == 1 and "astream_pack" not in done.state_dict()


def _ranks(monkeypatch: pytest.MonkeyPatch, rank: int, size: int) -> None:
    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv("WORLD_SIZE", str(size))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(size))


def test_every_token_once_over_ranks_and_workers(tokens: Any, monkeypatch: Any) -> None:
    """3 ranks x 2 workers, read one rank after another in this process: every token of the
    epoch exactly once (the ranks' pad samples are not packed); with pack_last="drop" each
    consumer loses only its trailing partial sequence."""
    path, docs = tokens
    every = sorted(t for d in docs for t in d.tolist())
    got, dropped = [], []
    for rank in range(3):
        _ranks(monkeypatch, rank, 3)
        got += flat(run(StreamingDataLoader(make(path, 50), batch_size=2, num_workers=2)))
        loader = StreamingDataLoader(make(path, 50, pack_last="drop"), batch_size=2, num_workers=2)
        dropped += flat(run(loader))
    assert sorted(got) == every
    assert not Counter(dropped) - Counter(every) and len(every) - len(dropped) < 6 * 50


def _suffix_tokens(order: list[np.ndarray], delivered: list[int]) -> list[int]:
    """Tokens of the documents from the first one not wholly in ``delivered`` on."""
    have = set(delivered)
    j = next((i for i, d in enumerate(order) if not set(d.tolist()) <= have), len(order))
    return sorted(t for d in order[j:] for t in d.tolist())


def test_resume_on_other_workers_restarts_at_a_sample_boundary(tokens: Any) -> None:
    """Saved with 2 workers, resumed with 0 or 3: the rest is exactly the documents from the
    first one that some worker had not wholly delivered: no token lost, the repeats bounded."""
    path, docs = tokens
    order = sample_docs(path)
    every = sorted(t for d in docs for t in d.tolist())
    loader = StreamingDataLoader(make(path, 32), batch_size=3, num_workers=2)
    head = run(loader, 9)
    state = loader.state_dict()
    for workers in (0, 3):
        again = StreamingDataLoader(make(path, 32), batch_size=3, num_workers=workers)
        again.load_state_dict(state)
        rest = flat(run(again))
        assert sorted(rest) == _suffix_tokens(order, flat(head))
        assert not Counter(every) - Counter(flat(head) + rest)  # nothing lost


def test_merged_rank_states_resume_on_another_world(tokens: Any, monkeypatch: Any) -> None:
    path, _ = tokens
    order = sample_docs(path)
    heads, states = [], []
    for rank in range(2):
        _ranks(monkeypatch, rank, 2)
        loader = StreamingDataLoader(make(path, 32), batch_size=3, num_workers=2)
        heads += flat(run(loader, 5 + rank))
        states.append(loader.state_dict())
    _ranks(monkeypatch, 0, 1)
    lone = StreamingDataLoader(make(path, 32), batch_size=3)
    with pytest.raises(ConfigError, match="merge_states"):
        lone.load_state_dict(states[1])
    with pytest.raises(ConfigError, match="not of the same job"):
        merge_states([states[0], {**states[1], "epoch": 3}])
    lone.load_state_dict(merge_states(states))
    rest = flat(run(lone))
    assert sorted(rest) == _suffix_tokens(order, heads)
    # the merged state resumes each rank of the original World exactly
    for rank in range(2):
        _ranks(monkeypatch, rank, 2)
        kw = {"batch_size": 3, "num_workers": 2}
        full = run(StreamingDataLoader(make(path, 32), **kw))
        again = StreamingDataLoader(make(path, 32), **kw)
        again.load_state_dict(merge_states(states))
        assert same(full[5 + rank :], run(again))


def test_batches_and_batch_format(tokens: Any) -> None:
    path, _ = tokens
    seqs = list(make(path, 24))
    got = list(make(path, 24).batches(batch_format="numpy"))
    assert [b["input_ids"].shape for b in got[:1]] == [(4, 24)]
    rows = [{k: b[k][i] for k in b} for b in got for i in range(len(b["input_ids"]))]
    assert same(rows, seqs)
    assert len(list(make(path, 24).batches(drop_last=True))) == len(seqs) // 4
    ds = make(path, 24)
    it = ds.batches()
    head = [next(it) for _ in range(3)]
    again = make(path, 24)
    again.load_state_dict(ds.state_dict())
    assert same(head + list(again.batches()), got)
    kw = {"batch_size": 5, "num_workers": 2, "batch_format": "torch"}
    full = run(StreamingDataLoader(make(path, 24), **kw))
    assert full[0]["input_ids"].shape == (5, 24)
    loader = StreamingDataLoader(make(path, 24), **kw)
    head = run(loader, 3)
    again = StreamingDataLoader(make(path, 24), **kw)
    again.load_state_dict(loader.state_dict())
    assert same(head + run(again), full)
    # a plain DataLoader over batch_view: batches of packed sequences, no cursor key in them
    from torch.utils.data import DataLoader

    view = make(path, 24, bs=5).batch_view("torch")
    plain = run(DataLoader(view, batch_size=None, num_workers=2))
    assert all(set(b) == {"input_ids", "position_ids", "segment_ids"} for b in plain)
    assert sorted(flat(plain)) == sorted(flat(full))


def test_transform_makes_the_token_column(tokens: Any) -> None:
    path, _ = tokens

    def tokenize(s: dict[str, Any]) -> dict[str, Any]:
        return {"input_ids": [int(t) for t in s["text"].split()]}

    ds = StreamingDataset(local=path, batch_size=4, pack_to=8, transform=tokenize)
    texts = [s["text"] for s in StreamingDataset(local=path, batch_size=4)]
    got = list(ds)
    assert got[0]["input_ids"].dtype == np.int64
    assert flat(got) == [int(t) for s in texts for t in s.split()]


def test_errors_name_the_argument(tokens: Any) -> None:
    path, _ = tokens
    cases = [
        ({"pack_to": 8, "pack_column": "missing"}, "pack_column='missing'.*no such column"),
        ({"pack_to": 8, "pack_column": "text"}, "pack_column='text'.*integer array"),
        ({"pack_to": 8, "pack_column": "doc"}, "pack_column='doc'.*integer array"),
        ({"pack_to": 8, "pack_column": "f"}, "pack_column='f'.*not integers"),
        ({"pack_column": "input_ids2"}, "pack_column=.*needs pack_to"),
        ({"pack_to": 8, "batching_method": "device_per_stream"}, "device_per_stream"),
        ({"pack_to": 8, "pack_pad_id": 2**40}, "pack_pad_id"),
    ]
    for kw, match in cases:
        with pytest.raises(ConfigError, match=match):
            StreamingDataset(local=path, batch_size=4, **kw)
    ds = make(path, 8)
    with pytest.raises(ConfigError, match="num_samples"):
        ds.state_dict(num_samples=10)
    with pytest.raises(ConfigError, match="ragged"):
        next(ds.batches(ragged="offsets"))
    with pytest.raises(ConfigError, match="does not pack"):
        import asyncio

        async def first() -> Any:
            async for x in ds.aiter():
                return x

        asyncio.run(first())
    with pytest.raises(ConfigError, match="ring must be an int >= 1"):
        ds.batch_view(ring=0)
    with pytest.raises(ConfigError, match="remaining_len"):
        StreamingDataLoader(ds, batch_size=2).remaining_len()


@pytest.mark.slow
@pytest.mark.parametrize("fmt", [None, "torch"])
def test_spawned_workers(tokens: Any, fmt: str | None) -> None:
    """Workers started by spawn get the pending resume through the shared memory too (packed
    batches through the ring with batch_format)."""
    path, _ = tokens
    kw = {"batch_size": 3, "num_workers": 2, "multiprocessing_context": "spawn",
          "batch_format": fmt}  # fmt: skip
    full = run(StreamingDataLoader(make(path, 40), **kw))
    loader = StreamingDataLoader(make(path, 40), **kw)
    head = run(loader, 4)
    again = StreamingDataLoader(make(path, 40), **kw)
    again.load_state_dict(loader.state_dict())
    assert same(head + run(again), full)


def test_epochs_mixing_and_drop(tokens: Any, tmp_path: Any) -> None:
    """Persistent workers run epoch after epoch, each with every token once (and another
    order); a mix packs each stream's samples as often as the epoch draws them; a
    pack_last="drop" loader resumes exactly too."""
    from astream import Stream

    path, docs = tokens
    every = Counter(t for d in docs for t in d.tolist())
    loader = StreamingDataLoader(make(path, 40), batch_size=4, num_workers=2,
                                 persistent_workers=True)  # fmt: skip
    epochs = [run(loader) for _ in range(2)]
    assert all(Counter(flat(e)) == every for e in epochs)
    assert flat(epochs[0]) != flat(epochs[1])
    other = str(tmp_path / "b")
    small = write_tokens(other, [5, 9, 1, 30], size_limit=200)
    mix = StreamingDataset(streams=[Stream(local=path), Stream(local=other, repeat=2)],
                           batch_size=4, pack_to=40, **OPTS)  # fmt: skip
    want = every + Counter({t: 2 for d in small for t in d.tolist()})  # doc ids overlap: add
    assert Counter(flat(list(mix))) == want
    kw = {"batch_size": 3, "num_workers": 2}
    full = run(StreamingDataLoader(make(path, 40, pack_last="drop"), **kw))
    first = StreamingDataLoader(make(path, 40, pack_last="drop"), **kw)
    head = run(first, len(full) - 2)
    again = StreamingDataLoader(make(path, 40, pack_last="drop"), **kw)
    again.load_state_dict(first.state_dict())
    assert same(head + run(again), full)


def test_loader_without_automatic_batching(tokens: Any) -> None:
    """batch_size=None: one sequence per step (default_convert), resumable exactly."""
    path, _ = tokens
    full = run(StreamingDataLoader(make(path, 40), batch_size=None))
    assert full[0]["input_ids"].shape == (40,)
    first = StreamingDataLoader(make(path, 40), batch_size=None)
    head = run(first, 7)
    again = StreamingDataLoader(make(path, 40), batch_size=None)
    again.load_state_dict(first.state_dict())
    assert same(head + run(again), full)
