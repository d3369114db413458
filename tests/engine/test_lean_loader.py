"""The ``num_workers=0`` StreamingDataLoader's lean iterator (``torch/dataloader.py``): the
same batches, order, resumption, ``drop_last``, warnings and errors as torch's own
single-process iterator, which each case runs beside it on the same data."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data.dataloader import _SingleProcessDataLoaderIter

from astream import StreamingDataLoader, StreamingDataset
from astream.torch.dataloader import _LeanIter, _ListFetcher


def collate(batch: list[Any]) -> list[Any]:
    return batch


def _flat(batch: Any) -> Any:
    """A batch as plain comparable data."""
    if isinstance(batch, dict):
        return {k: _flat(v) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return [_flat(x) for x in batch]
    if isinstance(batch, (torch.Tensor, np.ndarray)):
        return np.asarray(batch).tolist()
    return batch


def _loader(path: str, lean: bool, bs: int, state: Any = None, **kw: Any) -> StreamingDataLoader:
    ds = StreamingDataset(local=path, batch_size=bs, shuffle=True, shuffle_seed=3)
    ld = StreamingDataLoader(ds, batch_size=bs, num_workers=0, **kw)
    if state is not None:
        ld.load_state_dict(state)
    if not lean:  # torch's own iterator, fetcher and all
        ld._get_iterator = lambda: _SingleProcessDataLoaderIter(ld)  # type: ignore[method-assign]
    return ld


def _run(ld: StreamingDataLoader, stop: int | None = None) -> tuple[list[Any], Any, Any]:
    """The batches (up to ``stop``), the loader's and the dataset's states after them."""
    out, it = [], iter(ld)
    for b in it:
        out.append(_flat(b))
        if stop is not None and len(out) == stop:
            break
    return out, ld.state_dict(), ld._core.state_dict()


@pytest.mark.parametrize(
    "kw",
    [
        {"collate_fn": collate},
        {"collate_fn": collate, "drop_last": True},
        {"batch_format": "numpy", "ragged": "offsets"},
        {"batch_format": "torch", "ragged": "pad", "drop_last": True},
    ],
    ids=["dicts", "dicts-drop", "numpy-offsets", "torch-pad-drop"],
)
def test_lean_matches_torch_iterator(local_dataset: Any, kw: dict[str, Any]) -> None:
    path, _ = local_dataset
    bs = 24  # 1,000 samples: a short last batch
    lean, st_lean, ds_lean = _run(_loader(path, True, bs, **kw), stop=7)
    ref, st_ref, ds_ref = _run(_loader(path, False, bs, **kw), stop=7)
    assert lean == ref and st_lean == st_ref and ds_lean == ds_ref
    assert st_lean["sample_in_epoch"] == 7 * bs
    full, _, _ = _run(_loader(path, True, bs, **kw))
    full_ref, _, _ = _run(_loader(path, False, bs, **kw))
    assert full == full_ref
    assert len(full) == (1000 // bs if kw.get("drop_last") else -(-1000 // bs))


@pytest.mark.parametrize("drop_last", [False, True])
def test_list_fetcher_cuts_like_torch_fetcher(drop_last: bool) -> None:
    """Planned batches of any sizes (short, long, empty) are cut into loader batches exactly
    as torch's fetcher cuts the flat sample stream, and the samples left in a planned batch's
    iterator are the ones not handed out yet."""
    from torch.utils.data._utils.fetch import _IterableDatasetFetcher

    rng = np.random.default_rng(5)
    for trial in range(200):
        bs = int(rng.integers(1, 9))
        sizes = rng.integers(0, 3 * bs, int(rng.integers(0, 7))).tolist()
        if trial % 3 == 0:
            sizes = [bs] * 3 + sizes  # the common case first
        lists, at = [], 0
        for k in sizes:
            lists.append(list(range(at, at + k)))
            at += k
        its = [iter(x) for x in lists]
        lean = _ListFetcher(None, iter(its), bs, collate, drop_last)
        ref = _IterableDatasetFetcher(range(at), True, collate, drop_last)
        got, want = [], []
        for out, f in ((got, lean), (want, ref)):
            while True:
                try:
                    out.append(f.fetch([None] * bs))
                except StopIteration:
                    break
        assert got == want, (bs, sizes)
        for f in (lean, ref):  # ended stays ended
            with pytest.raises(StopIteration):
                f.fetch([None] * bs)
        if not drop_last:
            assert [x for b in got for x in b] == list(range(at))
        assert sum(len(list(it)) for it in its) == 0 or drop_last


def test_mid_batch_state_counts_as_torch(local_dataset: Any) -> None:
    """The dataset's own count of consumed samples after each loader batch equals the one
    under torch's fetcher (samples are taken from the shared list iterators)."""
    path, _ = local_dataset
    bs = 16
    ds = StreamingDataset(local=path, batch_size=bs, shuffle=True, shuffle_seed=3)
    state = ds.state_dict(3 * bs + 5, from_beginning=True)
    counts = []
    for lean in (True, False):
        ld = _loader(path, lean, bs, state, collate_fn=collate)
        seen = []
        for _ in zip(range(4), ld):
            seen.append(ld._core.state_dict()["sample_in_epoch"])
        counts.append(seen)
    assert counts[0] == counts[1]


def test_len_warning_and_profiler_fallback(local_dataset: Any) -> None:
    path, _ = local_dataset
    ld = _loader(path, True, 100, collate_fn=collate)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        ld._IterableDataset_len_called = 3  # as if len(ld) had said 3
        n = sum(1 for _ in ld)
    assert n == 10
    assert sum("was reported to be 3" in str(w.message) for w in got) == 7
    # under a torch profiler the lean iterator takes torch's path (its record_function range)
    ld2 = _loader(path, True, 100, collate_fn=collate)
    with torch.autograd.profiler.profile() as prof:
        m = sum(1 for _ in ld2)
    assert m == 10
    names = {e.name for e in prof.function_events}
    assert any(n.startswith("enumerate(DataLoader)#_LeanIter") for n in names)


def test_override_and_transform_take_torch_path(local_dataset: Any) -> None:
    path, _ = local_dataset

    class Sub(StreamingDataset):
        def __getitem__(self, idx: Any) -> Any:
            return int(super().__getitem__(idx)["label"])

    ds = Sub(local=path, batch_size=50, shuffle=False)
    ld = StreamingDataLoader(ds, batch_size=50, num_workers=0, collate_fn=collate)
    assert ds._sample_lists() is None
    assert not isinstance(ld._get_iterator(), _LeanIter)
    assert next(iter(ld)) == list(range(50))
    ds2 = StreamingDataset(local=path, batch_size=50, shuffle=False, transform=lambda x: 1)
    ld2 = StreamingDataLoader(ds2, batch_size=50, num_workers=0, collate_fn=collate)
    assert ds2._sample_lists() is None
    assert next(iter(ld2)) == [1] * 50
    ds3 = StreamingDataset(local=path, batch_size=50, shuffle=False)
    ld3 = StreamingDataLoader(ds3, batch_size=50, num_workers=0, collate_fn=collate)
    assert isinstance(ld3._get_iterator(), _LeanIter)
