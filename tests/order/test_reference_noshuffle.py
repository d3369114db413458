"""``shuffle=False`` deals the reference's sequence whatever ``shuffle_algo`` says: every
batching method (random, stratified, per_stream, device_per_stream), one stream, two streams of
equal proportion, three weighted by ``choose`` and by ``proportion`` + ``epoch_size``,
canonical nodes 1/2/3, worlds 1x1x1, 1x2x2, 2x2x1, 3x1x2, both epochs and a resume position:
every (node, rank, worker) gets exactly the batches mosaicml-streaming 0.13.0 deals it, with
``shuffle_algo`` left at its default (``"astream"``) and with each reference algorithm named.
Nothing is shuffled, so no algorithm has a say.

Also stratified batching's make-up by stream under astream's own (shuffled) algorithm: every
global batch holds each stream's share as the reference rounds it (batch sizes 1..9).

Goldens: ``scripts/gen_mosaic_noshuffle_golden.py`` (``noshuffle.npz``), run on the reference.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import numpy as np
import pytest

from astream.core.order import StreamSpec, plan_epoch
from astream.core.world import World
from astream.errors import ConfigError

from .test_reference_uneven import assert_reference_batches, case_plan

GOLDEN = os.path.join(os.path.dirname(__file__), "golden", "mosaic", "noshuffle.npz")
_DATA = np.load(GOLDEN)
_META = json.loads(str(_DATA["cases"]))
CASES = list(enumerate(_META["cases"]))
COMPOSITION = list(enumerate(_META["composition"]))
ALGOS = ("astream", "py1e", "py1br", "py1s", "py2s", "naive")


def _id(case: tuple[int, dict]) -> str:
    _k, c = case
    shape = "x".join(map(str, c["shape"]))
    return (
        f"{c['batching_method']}-cn{c['ncn']}-{shape}-{c['streams']}-e{c['epoch']}-at{c['start']}"
    )


def _plan(c: dict, algo: str):
    pn, rpn, _w = c["shape"]
    return case_plan(
        c, _META["streams"], shuffle_algo=algo, global_batch_size=c["batch"] * pn * rpn
    )


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_unshuffled_as_the_reference(case: tuple[int, dict], algo: str) -> None:
    k, c = case
    if "error" in c:  # the reference refuses it: so does astream, when planned or dealt
        with pytest.raises(ConfigError):
            p = _plan(c, algo)
            p.rank_num_samples(World(*c["shape"]), 0, c["start"])
        return
    p = _plan(c, algo)
    assert_reference_batches(p, _DATA[str(k)].astype(np.int64), c["shape"], c["start"])


def test_unshuffled_matrix_is_covered() -> None:
    seen = {(c["batching_method"], c["streams"]) for _, c in CASES if "error" not in c}
    assert len(seen) == 4 * 4
    shapes = {tuple(c["shape"]) for _, c in CASES if "error" not in c}
    assert shapes == {(1, 1, 1), (1, 2, 2), (2, 2, 1), (3, 1, 2)}
    assert {(c["epoch"], c["start"]) for _, c in CASES} == {(0, 0), (1, 0), (1, 37)}


def test_unshuffled_single_stream_is_index_order_every_method() -> None:
    """The issue's case: 203 samples, batch 4, one canonical node, one rank: every method
    yields 0, 1, 2, ... under the default algorithm; stratified and the per-stream methods drop
    the last partial batch (200, 201, 202), as the reference."""
    spec = [StreamSpec(np.array([7, 130, 1, 65], np.int64))]
    for method in ("random", "stratified", "per_stream", "device_per_stream"):
        for epoch in (0, 1):
            p = plan_epoch(spec, seed=9, epoch=epoch, num_canonical_nodes=1, batch_size=4,
                           shuffle=False, batching_method=method)  # fmt: skip
            got = np.concatenate(list(p.worker_batches(World(1, 1, 1), 0, 0))).tolist()
            want = 203 if method == "random" else 200
            assert got == list(range(want)), (method, epoch)


def _stream_of(ids: np.ndarray, sizes: list[list[int]]) -> np.ndarray:
    ends = np.cumsum([sum(s) for s in sizes])
    out: np.ndarray = np.searchsorted(ends, ids, side="right")
    return out


def _comp_id(case: tuple[int, dict]) -> str:
    _k, c = case
    return f"{c['streams']}-b{c['batch']}"


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("case", COMPOSITION, ids=[_comp_id(c) for c in COMPOSITION])
def test_stratified_composition_as_the_reference(case: tuple[int, dict], shuffle: bool) -> None:
    """Under astream's own algorithm (shuffled or not) each global batch holds, stream after
    stream, the number of samples of each stream the reference puts there."""
    k, c = case
    streams = _META["composition_streams"]
    world = World(1, 1, 1)
    args = dict(shuffle_algo="astream", shuffle=shuffle, global_batch_size=c["batch"])
    if "error" in c:  # a stream's share rounds to 0: refused, as the reference
        with pytest.raises(ConfigError, match=r"streams\[\d\]: its share of a"):
            p = case_plan(c, streams, **args)
            p.rank_num_samples(world, 0)
        return
    sizes = streams[c["streams"]]["sizes"]
    ref = _DATA[f"c{k}"].astype(np.int64)[0, 0, 0]
    ref_rows = [_stream_of(b[b >= 0], sizes).tolist() for b in ref if (b >= 0).any()]
    assert ref_rows and all(r == ref_rows[0] for r in ref_rows)
    for seed in (3, 11):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            p = case_plan(dict(c, seed=seed), streams, **args)
        got = [_stream_of(b, sizes).tolist() for b in p.worker_batches(world, 0, 0)]
        assert got and all(g == ref_rows[0] for g in got), (seed, got[0], ref_rows[0])


def test_stratified_two_equal_streams_batch_7() -> None:
    """The issue's example: equal proportions, batch 7: 3 of stream 0 then 4 of stream 1."""
    spec = [
        StreamSpec(np.array([40, 60, 3], np.int64), proportion=1.0),
        StreamSpec(np.array([70, 36], np.int64), proportion=1.0),
    ]
    p = plan_epoch(spec, seed=1, epoch=0, num_canonical_nodes=1, batch_size=7, shuffle=True,
                   batching_method="stratified")  # fmt: skip
    for b in p.worker_batches(World(1, 1, 1), 0, 0):
        assert (b >= 103).tolist() == [False] * 3 + [True] * 4


@pytest.mark.parametrize("ncn", [1, 2, 3, 7, 40])
def test_unshuffled_layout_as_runs_is_the_dealt_sequence(ncn: int) -> None:
    """Unshuffled whole streams under the default algorithm: the plan also carries its layout
    as a SubPlan (what the planner's runs model reads, so ``reference`` is False); that SubPlan
    gives the plan's own sequence, the reference's padding included (a shorter canonical node
    repeats its last sample; fewer samples than canonical nodes tile them)."""
    for sizes in ([7, 130, 1, 65], [3, 0, 2], [5], [1, 1]):
        spec = [StreamSpec(np.array(sizes, np.int64))]
        p = plan_epoch(spec, seed=4, epoch=1, num_canonical_nodes=ncn, batch_size=4,
                       shuffle=False)  # fmt: skip
        assert p.reference is False
        (sub,) = p._subs  # type: ignore[attr-defined]
        n = sum(sizes)
        assert p.num_samples == sub.num_samples == ncn * -(-n // ncn)
        pos = np.arange(p.num_samples, dtype=np.int64)
        assert sub.ids_at(pos).tolist() == p.ids_at(pos).tolist(), sizes
        shards = p.shard_of(p.ids_at(pos))
        for c in range(ncn):
            starts, part = sub._node(c)
            t = np.arange(int(sub.node_len(c)), dtype=np.int64)
            k = np.searchsorted(starts, t, side="right") - 1
            assert part.shard[k].tolist() == shards[t * ncn + c].tolist(), (sizes, c)


_MIXING = json.loads(Path(GOLDEN).with_name("mixing.json").read_text())
UNSHUFFLED = [(k, c) for k, c in enumerate(_MIXING["cases"]) if not c["shuffle"]]


@pytest.fixture(scope="module")
def mixing_streams(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    from astream import MDSWriter
    from scripts.gen_mosaic_mixing_golden import write_streams

    root = str(tmp_path_factory.mktemp("noshuffle"))
    written = write_streams(root, MDSWriter, _MIXING["shards"])
    return {name: path for name, (path, _shards) in written.items()}


@pytest.mark.parametrize(
    "case", UNSHUFFLED, ids=[f"{k}-{c['batching_method']}" for k, c in UNSHUFFLED]
)
def test_dataset_unshuffled_default_algorithm_as_the_reference(
    mixing_streams: dict[str, str], case: tuple[int, dict]
) -> None:
    """The reference's own StreamingDataset (mixing.json, its unshuffled cases, recorded under
    a named algorithm) against astream's with ``shuffle_algo`` left at its default: the same
    samples over two epochs, and after a checkpoint halfway through epoch 1."""
    from astream import Stream, StreamingDataset

    _, c = case
    skip = ("streams", "epochs", "error", "choose", "resumed", "state", "shuffle_algo")
    kw = {k: v for k, v in c.items() if k not in skip}

    def made() -> list[Stream]:
        return [
            Stream(local=mixing_streams[s["name"]], proportion=s.get("proportion"))
            for s in c["streams"]
        ]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if "error" in c:
            with pytest.raises(ConfigError):
                [s["id"] for s in StreamingDataset(streams=made(), **kw)]
            return
        ds = StreamingDataset(streams=made(), **kw)
        assert [[int(s["id"]) for s in ds] for _ in range(2)] == c["epochs"]
        half, rest = c["resumed"]
        state = ds.state_dict(half, True)
        again = StreamingDataset(streams=made(), **kw)
        again.load_state_dict(state)
        assert [int(s["id"]) for s in again] == rest


def test_worlds_the_reference_refuses_are_dealt_under_the_default_algorithm() -> None:
    """Unshuffled ``random`` under ``"astream"`` keeps its "relaxed" promise where the reference
    refuses a fresh epoch: nodes and canonical nodes that do not divide one another, and too few
    samples to widen one canonical node over 4 nodes. A named algorithm refuses both."""
    for sizes, ncn, world in (([7, 130, 1, 65], 2, World(3, 1, 2)), ([2], 1, World(4, 2, 8))):
        spec = [StreamSpec(np.array(sizes, np.int64))]
        kw = dict(seed=2, epoch=0, num_canonical_nodes=ncn, batch_size=1, shuffle=False)
        p = plan_epoch(spec, **kw)  # type: ignore[arg-type]
        got = [
            int(i)
            for r in range(world.num_ranks)
            for w in range(world.workers_per_rank)
            for b in p.worker_batches(world, r, w)
            for i in b
        ]
        assert set(got) == set(range(sum(sizes)))
        assert len(got) == p.padded_num_samples(world) < sum(sizes) + world.num_ranks + ncn
        named = plan_epoch(spec, shuffle_algo="py1e", **kw)  # type: ignore[arg-type]
        with pytest.raises(ConfigError):
            for r in range(world.num_ranks):
                for w in range(world.workers_per_rank):
                    list(named.worker_batches(world, r, w))
        orig = plan_epoch(spec, partition_algo="orig", **kw)  # type: ignore[arg-type]
        if ncn % world.num_nodes and world.num_nodes % ncn:
            with pytest.raises(ConfigError, match="incompatible"):
                orig.padded_num_samples(world)
