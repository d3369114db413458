"""Collated batches cross from DataLoader workers through the workers' shared-memory rings
(``StreamingDataLoader(handover=None|"ring")``): the batches equal, type for type and byte for
byte, what torch's own pickling delivers (``handover="torch"``), held batches are never
overwritten, reused slots carry the right batch, and nothing is left behind."""

from __future__ import annotations

import collections
import gc
import os
from typing import Any

import numpy as np
import pytest
import torch

from astream import MDSWriter, StreamingDataLoader, StreamingDataset
from astream.errors import ConfigError
from astream.torch import shm
from engine.test_batch_shm import _new_shm

COLUMNS = {
    "ids": "ndarray:int32",
    "fixed": "ndarray:float32:3,2",
    "label": "int",
    "x16": "float16",
    "flag": "uint8",
    "text": "str",
    "blob": "bytes",
}
Pair = collections.namedtuple("Pair", ["a", "b"])


@pytest.fixture(scope="module")
def path(tmp_path_factory: pytest.TempPathFactory) -> str:
    p = str(tmp_path_factory.mktemp("ringcollate") / "ds")
    rng = np.random.default_rng(5)
    with MDSWriter(out=p, columns=COLUMNS, size_limit=6_000) as w:
        for i in range(240):
            w.write(
                {
                    "ids": rng.integers(-9, 9, size=4, dtype=np.int32),
                    "fixed": rng.standard_normal((3, 2)).astype(np.float32),
                    "label": i,
                    "x16": float(i) / 8,
                    "flag": i % 3,
                    "text": f"t{i}",
                    "blob": bytes(rng.integers(0, 256, size=i % 7, dtype=np.uint8)),
                }
            )
    return p


def mixed_collate(samples: list[dict[str, Any]]) -> Any:
    """Every kind of value a collate may return: tensors of several dtypes and shapes (some
    that the ring takes, some it must leave to torch), nested containers, plain objects."""
    label = torch.tensor([s["label"] for s in samples])
    grid = torch.arange(len(samples) * 6, dtype=torch.float64).reshape(len(samples), 6)
    return {
        "label": label,
        "nested": [
            (label.to(torch.bfloat16), label % 2 == 0),
            {"zero_d": label.sum(), "empty": torch.zeros((0, 3), dtype=torch.int16)},
        ],
        "strided": grid[:, ::2],  # not contiguous: torch pickles it
        "pair": Pair(label * 2, "x"),  # namedtuple: left whole to torch
        "numpy": np.array([s["label"] for s in samples]),
        "texts": [s["text"] for s in samples],
        "blobs": tuple(s["blob"] for s in samples),
        "n": len(samples),
    }


def same(a: Any, b: Any) -> None:
    assert type(a) is type(b), (type(a), type(b))
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(a, b)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            same(x, y)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    else:
        assert a == b


def epoch(path: str, handover: str | None, collate: Any = None, hold: bool = True) -> list[Any]:
    ds = StreamingDataset(local=path, batch_size=8, shuffle=True, shuffle_seed=3)
    kw: dict[str, Any] = {} if collate is None else {"collate_fn": collate}
    ld = StreamingDataLoader(ds, batch_size=8, num_workers=2, handover=handover, **kw)
    if hold:
        return list(ld)
    # drop each batch as soon as it is read: slots are reused; keep a deep copy to compare
    out = []
    for b in ld:
        out.append(_copy(b))
        del b
    return out


def _copy(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.clone()
    if type(x) is dict:
        return {k: _copy(v) for k, v in x.items()}
    if type(x) in (list, tuple):
        return type(x)(_copy(v) for v in x)
    return x


@pytest.mark.parametrize("collate", [None, mixed_collate], ids=["default_collate", "mixed"])
def test_ring_batches_equal_torch_pickling(path: str, collate: Any) -> None:
    want = epoch(path, "torch", collate)
    got = epoch(path, None, collate)  # all held at once: the ring must not reuse a slot
    assert len(got) == len(want) == 30
    same(got, want)
    if collate is None:  # tensors view the slot; torch's default ones its own segments
        assert not got[0]["label"].is_shared() and want[0]["label"].is_shared()
    reused = epoch(path, "ring", collate, hold=False)
    same(reused, want)


def test_slots_reused_and_released(path: str) -> None:
    before = set(os.listdir("/dev/shm"))
    ds = StreamingDataset(local=path, batch_size=8, shuffle=True, shuffle_seed=3)
    ld = StreamingDataLoader(ds, batch_size=8, num_workers=2, collate_fn=mixed_collate)
    assert isinstance(ld.collate_fn, shm.RingCollate)
    for _ in range(3):
        assert sum(len(b["label"]) for b in ld) == 240
    gc.collect()
    assert shm.mapped_slots() <= 2 * 4  # the latest workers' rings at most
    del ld
    gc.collect()
    # entries of other processes on a shared machine (e.g. their semaphores) are not ours
    assert _new_shm(before) == set()


def test_handover_argument(path: str, tmp_path: Any) -> None:
    ds = StreamingDataset(local=path, batch_size=8)
    with pytest.raises(ConfigError, match="handover must be 'ring' or 'torch'"):
        StreamingDataLoader(ds, batch_size=8, handover="pickle")
    assert not isinstance(StreamingDataLoader(ds, batch_size=8).collate_fn, shm.RingCollate)
    plain = StreamingDataLoader(ds, batch_size=8, num_workers=1, handover="torch")
    assert not isinstance(plain.collate_fn, shm.RingCollate)
    view = StreamingDataLoader(
        ds, batch_size=8, num_workers=1, batch_format="torch", handover="torch"
    ).dataset
    assert view.shared_memory is False
    p = str(tmp_path / "tok")
    with MDSWriter(out=p, columns={"input_ids": "ndarray:int32"}) as w:
        for i in range(20):
            w.write({"input_ids": np.arange(i + 1, dtype=np.int32)})
    packed = StreamingDataset(local=p, batch_size=4, pack_to=8)
    with pytest.raises(ConfigError, match="handover='ring' with pack_to"):
        StreamingDataLoader(packed, batch_size=4, handover="ring")


@pytest.mark.slow  # spawned workers import torch: ~45 s on the loaded 2-core machine
def test_spawned_persistent_workers(path: str) -> None:
    """The wrapped collate pickles to spawned workers, and persistent workers reuse their
    slots across epochs; every epoch still equals torch's pickling."""

    def two_epochs(handover: str | None, **kw: Any) -> list[list[Any]]:
        ds = StreamingDataset(local=path, batch_size=8, shuffle=True, shuffle_seed=3)
        ld = StreamingDataLoader(ds, batch_size=8, num_workers=2, handover=handover, **kw)
        return [[_copy(b) for b in ld] for _ in range(2)]

    want = two_epochs("torch")
    got = two_epochs(None, persistent_workers=True, multiprocessing_context="spawn")
    same(got, want)
