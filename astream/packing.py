"""Token packing on a dataset (``pack_to=``): consumers, checkpoints, resumption.

Theory of operation
-------------------
Each consumer (a DataLoader worker of a rank, or the process iterating with ``num_workers=0``)
packs its own stream of samples (:mod:`astream.core.token_packer`): worker ``w`` of rank ``g`` packs
the planned batches ``w::W`` of that rank from the iteration's start position ``k0``. So the
sequences are a pure function of the data, the order settings (seed, epoch, canonical nodes,
``batch_size``) and the World (nodes, ranks per node, workers per rank).

Checkpoint (``astream_pack`` beside the usual keys, ``sample_in_epoch`` being ``k0``): per rank,
the cursor ``(samples, offset)`` of each of its streams after the last sequence the trainer
received, and ``next``, the stream whose batch the DataLoader's round-robin over workers takes
next. A rank's state describes that rank only (ranks consume different sample counts, since
documents differ in length); each rank saves and loads its own, and
:func:`merge_states` joins them for resuming on another World.

Resuming on the same World (nodes, ranks per node, workers, ``batch_size``, packing options):
exact. Stream ``s`` restarts at its cursor: its first ``samples`` are skipped by index
arithmetic (nothing is read), the next sample is entered at token ``offset``. The DataLoader
starts its round-robin at worker 0, so worker ``j`` of the resumed run packs stream
``(next + j) % W``: its batches then come in the order the interrupted run would have given
(torch visits workers cyclically and skips exhausted ones, in both runs alike).

Resuming on another World (or with another ``batch_size`` or packing options): at the sample
boundary ``k_safe``, the lowest global position that some stream of the state had not wholly
consumed (:class:`~astream.core.token_packer.StreamLayout` maps a stream's cursor to a position).
Every sample before ``k_safe`` was delivered whole, so no token is lost; tokens from
``k_safe`` on that some consumer had delivered already are delivered again. It needs the
cursors of every rank: a single rank's state from a multi-rank job raises ``ConfigError`` there
(merge the ranks' states first).

Shared memory (:class:`PackShared`): a pending resume must reach DataLoader workers that
already exist (``persistent_workers=True``), so it lives in anonymous shared memory beside the
dataset's epoch state; each worker takes its slot once, at its first iteration of the resumed
(epoch, position).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from astream.core.token_packer import StreamLayout, pack_tokens
from astream.core.world import World
from astream.errors import ConfigError
from astream.runtime.config import MAX_PACK_TO
from astream.runtime.placement import dataloader_worker, detect
from astream.shared import MAX_WORKERS, SharedInts, StaleIteration

__all__ = ["KEY", "PackShared", "PackedBatch", "iter_packed", "merge_states", "setup"]

KEY = "__astream_pack__"  # an item's (stream, samples, offset), for StreamingDataLoader
_HEAD = 9  # valid, epoch, k0, k_safe, nodes, rpn, workers, rotation, generation


class PackShared(SharedInts):
    """A pending packed resume, shared by a dataset and its DataLoader workers: header, then
    per stream ``(samples, offset)``, then per worker a pending flag."""

    SIZE = _HEAD + 3 * MAX_WORKERS

    def clear(self) -> None:
        self._a[0] = 0

    def set(
        self,
        epoch: int,
        k0: int,
        k_safe: int,
        world: World,
        rotation: int,
        cursors: list[list[int]],
    ) -> None:
        a = self._a
        a[0] = 0
        a[1:8] = [epoch, k0, k_safe, world.num_nodes, world.ranks_per_node,
                  world.workers_per_rank, rotation]  # fmt: skip
        a[8] += 1
        w = world.workers_per_rank
        a[_HEAD : _HEAD + 2 * w] = np.asarray(cursors, dtype=np.int64).reshape(-1)
        a[_HEAD + 2 * MAX_WORKERS : _HEAD + 2 * MAX_WORKERS + w] = 1
        a[0] = 1

    def resolve(
        self, epoch: int, start: int, world: World
    ) -> tuple[int, int, np.ndarray[Any, Any] | None]:
        """(start, rotation, cursors per stream or None) of an iteration of (epoch, start) on
        ``world``: the pending resume's when it is for that iteration, else (start, 0, None)."""
        a = self._a
        if not a[0] or int(a[1]) != epoch or int(a[2]) != start:
            return start, 0, None
        w = world.workers_per_rank
        same = (int(a[4]), int(a[5]), int(a[6])) == (
            world.num_nodes, world.ranks_per_node, w)  # fmt: skip
        if not same:
            k_safe = int(a[3])
            if k_safe < 0:
                raise ConfigError(
                    f"this packed state was saved on a World of {int(a[4])} node(s) x "
                    f"{int(a[5])} rank(s) x {int(a[6])} worker(s) and holds the cursors of one "
                    "rank only; resuming on another World needs every rank's: join them with "
                    "astream.packing.merge_states and load the result"
                )
            return k_safe, 0, None
        return start, int(a[7]), a[_HEAD : _HEAD + 2 * w].reshape(w, 2).copy()

    def take(self, worker: int, epoch: int, start: int, world: World) -> tuple[int, int, int, int]:
        """(start, stream, samples, offset) of worker ``worker``'s iteration of (epoch, start);
        a pending cursor is taken once."""
        begin, rot, cursors = self.resolve(epoch, start, world)
        w = world.workers_per_rank
        stream = (rot + worker) % w
        flag = _HEAD + 2 * MAX_WORKERS + worker
        if cursors is None or not self._a[flag]:
            return begin, stream, 0, 0
        self._a[flag] = 0
        return begin, stream, int(cursors[stream, 0]), int(cursors[stream, 1])


def setup(ds: Any, kw: dict[str, Any]) -> None:
    """Checks the packing arguments against the loaded dataset and sets ``ds.pack``,
    ``ds._pack_dtype`` and the shared resume state (``ConfigError`` naming the argument)."""
    from astream.core.token_packer import check_pack, token_dtype

    spec = check_pack(kw["pack_to"], kw["pack_column"], kw["pack_last"], kw["pack_pad_id"])
    if spec is not None and spec.seq_len > MAX_PACK_TO:  # why: astream.runtime.config's table
        raise ConfigError(
            f"pack_to must be in 1..{MAX_PACK_TO} tokens per sequence (2**24), got {spec.seq_len}"
        )
    ds.pack, ds._pack_dtype, ds._pack_progress = spec, None, None
    ds._pack_shared = PackShared() if spec is not None else None
    if spec is None:
        return
    if ds.cfg.batching_method == "device_per_stream":
        raise ConfigError(
            "batching_method='device_per_stream' cannot be combined with pack_to (its padding "
            "repeats whole batches, whose tokens would be packed twice)"
        )
    found = []
    for k, src in enumerate(ds.catalog.sources):
        for i, entry in src.index.table.configs():
            names = list(entry.column_names or [])
            if spec.column not in names:
                if kw["transform"] is None and not _overridden(ds):
                    raise ConfigError(
                        f"pack_column={spec.column!r}: stream {k}, shard {i} has no such column "
                        f"(columns: {names})"
                    )
                continue
            enc = list(entry.column_encodings or [])[names.index(spec.column)]
            found.append((f"stream {k}, shard {i}", enc))
    if kw["transform"] is None and not _overridden(ds):
        ds._pack_dtype = token_dtype(found, spec)
    else:
        # a transform or __getitem__ override makes the column: int64 out, checked per sample
        info = np.iinfo(np.int64)
        if not info.min <= spec.pad_id <= info.max:
            raise ConfigError(f"pack_pad_id={spec.pad_id} does not fit int64")


def _overridden(ds: Any) -> bool:
    return bool(ds._has_override())


def _limit(batches: Iterator[Any], n: int) -> Iterator[Any]:
    """The first ``n`` samples of ``batches``."""
    for b in batches:
        if n <= 0:
            return
        if len(b) > n:
            yield b[:n]
            return
        n -= len(b)
        yield b


def _skip(batches: Iterator[Any], n: int) -> Iterator[Any]:
    for b in batches:
        if n >= len(b):
            n -= len(b)
            continue
        yield b[n:]
        break
    yield from batches


def iter_packed(ds: Any, carry: bool = False) -> Iterator[dict[str, Any]]:
    """One iteration of ``ds``'s packed sequences in this process (see the module docstring).
    ``carry``: each item also holds ``KEY`` = (stream, samples, offset) after it."""
    try:
        epoch, start = ds._take_epoch()
    except StaleIteration:  # a worker's iteration its loader has already left: empty
        return iter(())
    place = detect(ds.cfg.replication)
    world, rank = place.world, place.rank
    begin, stream, samples, offset = ds._pack_shared.take(place.worker, epoch, start, world)
    ds._current = (epoch, begin)
    plan = ds.plan(epoch)
    lay = StreamLayout(plan, world, rank, stream, begin)
    owner = place.worker == 0 and world.workers_per_rank == 1
    progress: dict[str, Any] = {
        "epoch": epoch, "start": begin, "world": world, "rank": rank,
        "cursors": [[samples, offset]], "next": 0, "done": False,
    }  # fmt: skip
    if owner:
        ds._pack_progress = progress
    return _run(ds, plan, lay, world, rank, epoch, samples, offset, carry, progress)


def _run(
    ds: Any,
    plan: Any,
    lay: StreamLayout,
    world: World,
    rank: int,
    epoch: int,
    samples: int,
    offset: int,
    carry: bool,
    progress: dict[str, Any],
) -> Iterator[dict[str, Any]]:
    spec = ds.pack
    stream, begin = lay.stream, lay.start
    batches: Iterator[Any] = plan.worker_batches(world, rank, stream, begin)
    ds.engine.follow(plan, world, rank, stream, epoch, begin, samples)
    if samples:
        batches = _skip(batches, samples)
    batches = _limit(batches, lay.length - samples)  # the rank's pad sample is not packed
    column = spec.column
    docs = (x[column] for x in ds._samples(batches, [0, None, 0]))
    for item, cur in pack_tokens(docs, spec, ds._pack_dtype, samples=samples, offset=offset):
        progress["cursors"][0] = [cur[0], cur[1]]
        if carry:
            item[KEY] = (stream, cur[0], cur[1])
        yield item
    progress["done"] = True


class PackedBatch:
    """``size`` packed sequences to be stacked into ``{column: (size, seq_len)}`` arrays, each
    allocated by ``alloc`` (private memory, or a DataLoader worker's shared-memory slot:
    :meth:`astream.torch.shm.WorkerRing.finish` takes this like a column batch). The columns
    are those of the sequences (the token column, ``position_ids``, ``segment_ids``), a
    carried ``KEY`` left out."""

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items
        self.size = len(items)
        self.columns = [k for k in items[0] if k != KEY]

    def nbytes_bound(self) -> int:
        """At least the bytes :meth:`finish` asks its allocator for (64 per array for
        alignment)."""
        first = self.items[0]
        return sum(self.size * int(first[k].nbytes) + 64 for k in self.columns)

    def finish(self, alloc: Any = None) -> dict[str, np.ndarray[Any, Any]]:
        """The stacked arrays (``alloc(shape, dtype)`` gives each one; default ``np.empty``)."""
        out: dict[str, np.ndarray[Any, Any]] = {}
        items = self.items
        for k in self.columns:
            a0 = np.asarray(items[0][k])
            shape = (self.size, *a0.shape)
            dst = np.empty(shape, a0.dtype) if alloc is None else alloc(shape, a0.dtype)
            for j, x in enumerate(items):
                dst[j] = x[k]
            out[k] = dst
        return out


def chunks(
    items: Iterator[dict[str, Any]], size: int, drop_last: bool
) -> Iterator[list[dict[str, Any]]]:
    """``size`` consecutive sequences at a time (the last chunk shorter unless ``drop_last``)."""
    buf: list[dict[str, Any]] = []
    for item in items:
        buf.append(item)
        if len(buf) == size:
            yield buf
            buf = []
    if buf and not drop_last:
        yield buf


def group(items: Iterator[dict[str, Any]], size: int, drop_last: bool) -> Iterator[dict[str, Any]]:
    """``size`` consecutive sequences stacked: ``{column: (size, seq_len)}``; a carried
    ``KEY`` is the last item's."""
    return (_stack(buf) for buf in chunks(items, size, drop_last))


def _stack(buf: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = PackedBatch(buf).finish()
    if KEY in buf[-1]:
        out[KEY] = buf[-1][KEY]
    return out


# -- checkpoints ---------------------------------------------------------------------------------
def make_state(
    ds: Any, epoch: int, start: int, world: World, rank: int, cursors: list[list[int]], nxt: int
) -> dict[str, Any]:
    state: dict[str, Any] = ds._state(epoch, start, world)
    state["initial_workers_per_rank"] = world.workers_per_rank
    state["astream_pack"] = {
        **ds.pack.to_dict(),
        "batch_size": int(ds.cfg.batch_or_1),
        "world": [world.num_nodes, world.ranks_per_node, world.workers_per_rank],
        "ranks": {str(rank): {"cursors": [list(map(int, c)) for c in cursors], "next": int(nxt)}},
    }
    return state


def owner_state(ds: Any) -> dict[str, Any]:
    """``ds.state_dict()`` of a packing dataset, in the process that iterates it."""
    if dataloader_worker() is not None:
        raise ConfigError(
            "state_dict() inside a DataLoader worker of a packing dataset (pack_to=): "
            "checkpoint through astream.StreamingDataLoader, which tracks every worker's cursor"
        )
    p = ds._pack_progress
    if p is None or ds._epochs.owner_current() is not None:
        if ds._epochs.owner_current() is not None:
            raise ConfigError(
                "DataLoader workers iterate this packing dataset (pack_to=); its state is "
                "theirs: use astream.StreamingDataLoader(...).state_dict()"
            )
        epoch, start = ds._next_position()
        return dict(ds._state(epoch, start, detect(ds.cfg.replication).world))
    if p["done"]:
        return dict(ds._state(p["epoch"] + 1, 0, p["world"]))
    return make_state(ds, p["epoch"], p["start"], p["world"], p["rank"], p["cursors"], 0)


def merge_states(states: list[dict[str, Any]]) -> dict[str, Any]:
    """One packed state holding the cursors of every rank, from the ranks' own states (all
    saved at the same step of one job; e.g. gathered with ``all_gather_object``)."""
    if not states:
        raise ConfigError("merge_states: no state given")
    out = {k: v for k, v in states[0].items() if k != "astream_pack"}
    pack0 = states[0].get("astream_pack")
    if pack0 is None:
        raise ConfigError("merge_states: state 0 has no 'astream_pack' (not a packed state)")
    ranks: dict[str, Any] = {}
    for i, st in enumerate(states):
        pk = st.get("astream_pack")
        same = {k: v for k, v in st.items() if k != "astream_pack"} == out
        if (
            pk is None
            or not same
            or {k: v for k, v in pk.items() if k != "ranks"}
            != {k: v for k, v in pack0.items() if k != "ranks"}
        ):
            raise ConfigError(
                f"merge_states: state {i} is not of the same job and step as state 0 "
                "(epoch, position, World and packing options must match)"
            )
        for r, v in pk["ranks"].items():
            if r in ranks and ranks[r] != v:
                raise ConfigError(f"merge_states: two different states of rank {r}")
            ranks[r] = v
    out["astream_pack"] = {**pack0, "ranks": ranks}
    return out


def _check_pack_state(pk: Any) -> tuple[World, dict[int, tuple[list[list[int]], int]]]:
    try:
        world = World(*(int(x) for x in pk["world"]))
        ranks = {}
        for r, v in pk["ranks"].items():
            cursors = [[int(a), int(b)] for a, b in v["cursors"]]
            if len(cursors) != world.workers_per_rank or any(a < 0 or b < 0 for a, b in cursors):
                raise ValueError(r)
            nxt = int(v["next"])
            if not 0 <= nxt < world.workers_per_rank:
                raise ValueError(r)
            ranks[world.check_rank(int(r))] = (cursors, nxt)
        int(pk["seq_len"]), int(pk["batch_size"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"state['astream_pack']: malformed ({exc!r})") from None
    return world, ranks


def load_state(ds: Any, obj: dict[str, Any], core_load: Any) -> None:
    """``ds.load_state_dict(obj)`` of a packing dataset (``core_load``: the sample-position
    load it builds on)."""
    if not isinstance(obj, dict) or "astream_pack" not in obj:
        ds._pack_shared.clear()
        core_load(obj)
        return
    pk = obj["astream_pack"]
    old, ranks = _check_pack_state(pk)
    base = {k: v for k, v in obj.items() if k != "astream_pack"}
    core_load(base)  # epoch and k0, the order settings
    ds._pack_shared.clear()
    epoch, k0 = int(base["epoch"]), int(base["sample_in_epoch"])
    plan = ds.plan(epoch)
    if len(ranks) == old.num_ranks:
        k_safe = min(
            StreamLayout(plan, old, g, s, k0).position(cur[s][0])
            for g, (cur, _) in ranks.items()
            for s in range(old.workers_per_rank)
        )
    else:
        k_safe = -1
    place = detect(ds.cfg.replication)
    me = ranks.get(place.rank)
    same_opts = {k: pk.get(k) for k in ds.pack.to_dict()} == ds.pack.to_dict() and int(
        pk["batch_size"]
    ) == int(ds.cfg.batch_or_1)
    same_place = (old.num_nodes, old.ranks_per_node) == (
        place.world.num_nodes, place.world.ranks_per_node)  # fmt: skip
    if me is not None and same_opts and same_place:
        # exact on the same World; another num_workers falls back to k_safe (PackShared)
        ds._pack_shared.set(epoch, k0, k_safe, old, me[1], me[0])
        return
    if k_safe < 0:
        raise ConfigError(
            f"this packed state holds the cursors of rank(s) {sorted(ranks)} of a "
            f"{old.num_ranks}-rank World; resuming here (rank {place.rank} of "
            f"{place.world.num_ranks}, or other packing options/batch_size) needs every "
            "rank's cursors: join the ranks' states with astream.packing.merge_states"
        )
    core_load({**base, "sample_in_epoch": min(k_safe, plan.num_samples)})


def check_batches(ds: Any, batch_size: Any, ragged: str) -> int:
    """The sequences per batch of packed batch output (the dataset's ``batch_size``)."""
    if batch_size is not None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"batch_size must be an int >= 1, got {batch_size!r}")
        if ds.cfg.batch_size is None:
            ds.batch_size = batch_size
        elif batch_size != ds.cfg.batch_size:
            raise ConfigError(
                f"batch_size={batch_size} differs from the dataset's batch_size="
                f"{ds.cfg.batch_size}: a packed batch is batch_size sequences"
            )
    if ragged != "pad":
        raise ConfigError(
            f"ragged={ragged!r} does not apply with pack_to: packed sequences all have "
            "pack_to tokens"
        )
    return int(ds.cfg.batch_or_1)


def packed_batches(
    ds: Any, batch_size: Any, batch_format: str, ragged: str, drop_last: bool
) -> Iterator[dict[str, Any]]:
    """``ds.batches()`` of a packing dataset: ``batch_size`` sequences stacked per batch."""
    size = check_batches(ds, batch_size, ragged)
    convert = ds._batch_converter(batch_format)
    return (convert(b) for b in group(iter_packed(ds), size, bool(drop_last)))
