"""The reference's (mosaicml-streaming 0.13.0) shuffle algorithms, reproduced bit for bit.

Theory of operation
-------------------
Each function maps ``(shard_sizes, num_canonical_nodes, seed, epoch, block_size)`` to the
epoch's global sample order: an int64 array, position -> sample id, the same array the
reference's ``get_shuffle(algo, ...)`` returns. Reproducing it exactly means making the same
numpy ``Generator`` (PCG64) calls, with the same seeds, arguments and in the same order:

- a *run* generator ``default_rng(seed)`` permutes the shards once per run (so the grouping of
  shards into canonical nodes is the same every epoch);
- the shard sequence is cut into ``num_canonical_nodes`` parts of ``total * (k + 1) // n``
  samples each, splitting a shard at a part boundary (:func:`divide_spans`);
- an *epoch* generator ``default_rng(seed + epoch)`` permutes the spans inside each part, then
  each algorithm shuffles samples:

  ``py1s``  each span's samples on their own;
  ``py2s``  like py1s, but every shard's samples are first shuffled by the run generator (before
            the cut), and the spans inside a part are shuffled again per epoch;
  ``py1br`` contiguous blocks of random size in ``[0.75 b, 1.25 b)`` laid over each part, offset
            by a per-part stagger, each block shuffled;
  ``py1e``  each span's samples shuffled, then every sample of a span moved by a uniform shift
            of at most ``(block - span) / 2`` positions, and the part sorted by position;
  ``naive`` one global permutation of all samples.

Resampled streams (``proportion``/``repeat``/``choose``/``epoch_size``): :func:`resample`
reproduces the reference's per-shard draw (:func:`shard_choices`: whole copies, then picks of
``sampling_granularity`` samples in a drawn order) and its index-order id table (full copies,
then a sorted random subset); the shuffle then runs over the per-copy "shuffle units". The
planner (``core.order.plan_epoch``) deals positions as the reference does and maps a dealt
position ``b`` to ``ids[perm[b]]``, so this costs O(epoch) memory, as in the reference.

``Generator.shuffle`` draws the same numbers for a Python list as for a 1-D array of the same
length, so spans are permuted here as index arrays. ``py1b`` does not exist in 0.13.0 (its
``get_shuffle`` has no such key), so it is not offered. Pure numpy; nothing here does I/O.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import NDArray

from astream.errors import ConfigError

__all__ = [
    "REFERENCE_ALGOS",
    "canonical_index",
    "canonical_layout",
    "default_block_size",
    "default_num_canonical_nodes",
    "divide_spans",
    "get_shuffle",
    "resample",
    "shard_choices",
]

Spans = list[tuple[int, int]]
I64 = NDArray[np.int64]


def default_num_canonical_nodes(algo: str, num_physical_nodes: int) -> int:
    """The reference's ``num_canonical_nodes`` when left unset (per-shard algorithms: 64x)."""
    return 64 * num_physical_nodes if algo in ("py1s", "py2s") else num_physical_nodes


def default_block_size(num_canonical_nodes: int) -> int:
    """The reference's ``shuffle_block_size`` when left unset."""
    return max(4_000_000 // num_canonical_nodes, 1 << 18)


def canonical_layout(num_samples: int, ncn: int, num_nodes: int) -> tuple[int, int, int]:
    """(samples per canonical node ``P``, of which real ``L``, node ratio) of the reference's
    index-order layout: ``ncn`` rows of ``L = ceil(n / ncn)`` positions, widened to ``P`` (a
    multiple of ``num_nodes // ncn``) when there are fewer canonical than physical nodes, so
    each canonical node splits evenly over its physical nodes. The epoch is ``ncn * P``."""
    length = -(-num_samples // ncn)
    ratio = num_nodes // ncn if ncn < num_nodes else 0
    pad = (-length) % ratio if ratio else 0
    return length + pad, length, ratio


def canonical_index(num_samples: int, ncn: int, num_nodes: int, q: I64) -> I64:
    """Index-order position dealt at position ``q`` of the reference's padded epoch.

    Row ``c`` (canonical node) starts at ``c * n // ncn``; position ``q`` is column
    ``q // ncn`` of row ``q % ncn``. A row shorter than ``L`` repeats its last sample in column
    ``L - 1``; columns ``L..P-1`` repeat columns ``L - P + L - ratio + 1 ...`` (a few back); with
    fewer samples than rows (or as many, and fewer rows than nodes) the rows tile ``0..n-1``.
    """
    n = num_samples
    width, length, ratio = canonical_layout(n, ncn, num_nodes)
    q = np.asarray(q, np.int64)
    c, t = q % ncn, q // ncn
    if not (n > ncn or (n == ncn and ncn >= num_nodes)):
        out: I64 = (c * width + t) % n
        return out
    pad = width - length
    if pad:
        back = length - pad - ratio + 1  # the first column the padding repeats
        if back < 0:
            raise ValueError(
                f"the reference cannot pad {n} samples over {ncn} canonical nodes for "
                f"{num_nodes} physical nodes (too few samples per canonical node)"
            )
        t = np.where(t >= length, t - length + back, t)
    starts = c * n // ncn
    short = ((c + 1) * n // ncn - starts) < length
    index: I64 = starts + t - ((t == length - 1) & short)
    return index


def _ids_dtype(total: int) -> type[np.signedinteger]:
    """int32 ids while they fit: half the memory of the reference's int64 (same draws: numpy's
    ``shuffle`` of a 1-D array draws by its length only, whatever its item size)."""
    return np.int32 if total < 2**31 else np.int64


def _shard_spans(shard_sizes: NDArray[np.int64]) -> tuple[Spans, int]:
    ends = np.cumsum(np.asarray(shard_sizes, np.int64))
    begins = ends - np.asarray(shard_sizes, np.int64)
    spans = [(int(b), int(e)) for b, e in zip(begins, ends)]
    return spans, int(ends[-1]) if len(ends) else 0


def divide_spans(spans: Spans, total: int, parts: int) -> tuple[Spans, Spans]:
    """Cut a sequence of sample spans into ``parts`` runs of ``total * (k+1) // parts`` samples.

    Returns the (possibly split) spans and, per part, the ``[begin, end)`` range of indices into
    them. A span that straddles a boundary is split: its head ends the part, its tail starts the
    next one.
    """
    out: Spans = []
    groups: Spans = []
    pending = list(spans)
    i = 0
    done = 0
    for k in range(parts):
        limit = total * (k + 1) // parts
        first = len(out)
        while i < len(pending):
            lo, hi = pending[i]
            if done + (hi - lo) > limit:
                room = limit - done
                if room > 0:
                    out.append((lo, lo + room))
                    pending[i] = (lo + room, hi)
                    done += room
                break
            out.append((lo, hi))
            done += hi - lo
            i += 1
        groups.append((first, len(out)))
    return out, groups


def _run_order(shard_sizes: NDArray[np.int64], ncn: int, seed: int) -> tuple[Spans, Spans, int]:
    spans, total = _shard_spans(shard_sizes)
    perm = np.arange(len(spans))
    np.random.default_rng(seed).shuffle(perm)
    spans = [spans[j] for j in perm]
    out, groups = divide_spans(spans, total, ncn)
    return out, groups, total


def _shuffle_within_groups(spans: Spans, groups: Spans, rng: np.random.Generator) -> Spans:
    result = list(spans)
    for begin, end in groups:
        perm = np.arange(end - begin)
        rng.shuffle(perm)
        result[begin:end] = [spans[begin + j] for j in perm]
    return result


def _shuffled_spans(
    sizes: I64, ncn: int, seed: int, epoch: int
) -> tuple[Spans, Spans, np.random.Generator, I64]:
    """The start the shard-span algorithms share: the run's spans, each canonical node's spans
    shuffled by the epoch's generator (which the caller goes on drawing from), and an empty
    id array of the epoch's length."""
    spans, groups, total = _run_order(sizes, ncn, seed)
    rng = np.random.default_rng(seed + epoch)
    spans = _shuffle_within_groups(spans, groups, rng)
    return spans, groups, rng, np.empty(total, _ids_dtype(total))


def _py1s(sizes: I64, ncn: int, seed: int, epoch: int, block: int) -> I64:
    spans, _groups, rng, ids = _shuffled_spans(sizes, ncn, seed, epoch)
    at = 0
    for lo, hi in spans:
        ids[at : at + hi - lo] = np.arange(lo, hi)
        rng.shuffle(ids[at : at + hi - lo])
        at += hi - lo
    return ids


def _py2s(sizes: I64, ncn: int, seed: int, epoch: int, block: int) -> I64:
    sizes = np.asarray(sizes, np.int64)
    ends = np.cumsum(sizes)
    run = np.random.default_rng(seed)
    perm = np.arange(len(sizes))
    run.shuffle(perm)
    shards = []
    dtype = _ids_dtype(int(ends[-1]) if len(ends) else 0)
    for j in perm:
        samples = np.arange(ends[j] - sizes[j], ends[j], dtype=dtype)
        shards.append(samples)
    for samples in shards:
        run.shuffle(samples)
    # Cut the shuffled shards into parts; a straddling shard's shuffled head ends a part and
    # its tail starts the next.
    total = int(ends[-1]) if len(ends) else 0
    parts: list[list[NDArray[np.int64]]] = []
    i = 0
    done = 0
    for k in range(ncn):
        limit = total * (k + 1) // ncn
        part: list[NDArray[np.int64]] = []
        while i < len(shards):
            cur = shards[i]
            if done + len(cur) > limit:
                room = limit - done
                if room > 0:
                    part.append(cur[:room])
                    shards[i] = cur[room:]
                    done += room
                break
            part.append(cur)
            done += len(cur)
            i += 1
        parts.append(part)
    rng = np.random.default_rng(seed + epoch)
    out: list[NDArray[np.int64]] = []
    for part in parts:
        order = np.arange(len(part))
        rng.shuffle(order)
        part = [part[j] for j in order]
        for piece in part:
            rng.shuffle(piece)
        out.extend(part)
    return np.concatenate(out) if out else np.zeros(0, np.int64)


def _py1br(sizes: I64, ncn: int, seed: int, epoch: int, block: int) -> I64:
    spans, groups, rng, ids = _shuffled_spans(sizes, ncn, seed, epoch)
    stagger = rng.integers(0, int(0.75 * block), (ncn,))
    stop = 0
    for node, (begin, end) in enumerate(groups):
        start = stop
        for lo, hi in spans[begin:end]:
            ids[stop : stop + hi - lo] = np.arange(lo, hi)
            stop += hi - lo
        ranges = []
        edge = start
        lag = stagger[node]
        while edge < stop:
            size = rng.integers(int(0.75 * block), int(1.25 * block))
            a = max(edge - lag, start)
            b = min(edge + size - lag, stop)
            ranges.append((a, b))
            edge += b - a
        for a, b in ranges:
            rng.shuffle(ids[a:b])
    return ids


def _py1e(sizes: I64, ncn: int, seed: int, epoch: int, block: int) -> I64:
    spans, groups, rng, ids = _shuffled_spans(sizes, ncn, seed, epoch)
    at = 0
    narrow = False
    for begin, end in groups:
        mine = spans[begin:end]
        lengths = [hi - lo for lo, hi in mine]
        n = sum(lengths)
        if n == 0:
            raise ConfigError(
                f"The number of samples assigned to a canonical node is 0: the stream has "
                f"fewer samples than num_canonical_nodes={ncn}"
            )
        samples = np.empty(n, ids.dtype)
        put = 0
        for lo, hi in mine:
            chunk = np.arange(lo, hi, dtype=ids.dtype)
            rng.shuffle(chunk)
            samples[put : put + hi - lo] = chunk
            put += hi - lo
        where = np.arange(n, dtype=np.float64)
        put = 0
        for length in lengths:
            drawn = rng.integers(int(0.75 * block), int(1.25 * block))
            reach = float((drawn - length) / 2)
            if reach < 0:
                reach = 0.0
                narrow = True
            low = max(-reach, -put)
            high = min(reach, n - put - length)
            where[put : put + length] += rng.uniform(low=low, high=high, size=length)
            put += length
        ids[at : at + n] = samples[np.argsort(where)]
        at += n
    if narrow:
        warnings.warn(
            "shuffle_block_size is smaller than some shards: those shards are not mixed with "
            "others (py1e); raise shuffle_block_size for a stronger shuffle",
            stacklevel=3,
        )
    return ids


def _naive(sizes: I64, ncn: int, seed: int, epoch: int, block: int) -> I64:
    total = int(np.asarray(sizes, np.int64).sum())
    ids = np.arange(total, dtype=_ids_dtype(total))  # what permutation(total) shuffles
    np.random.default_rng(seed + epoch).shuffle(ids)
    return ids


REFERENCE_ALGOS: dict[str, Callable[..., NDArray[np.int64]]] = {
    "py1br": _py1br,
    "py1e": _py1e,
    "py1s": _py1s,
    "py2s": _py2s,
    "naive": _naive,
}


def shard_choices(
    sizes: I64, choose: int, granularity: int, seed: int, epoch: int, use_epoch: bool
) -> I64:
    """How many samples each shard of one stream gives this epoch (the reference's draw):
    whole multiples of the stream first, then the remainder in picks of ``granularity``
    samples, in an order drawn from ``default_rng(seed [+ epoch])``."""
    sizes = np.asarray(sizes, np.int64)
    total = int(sizes.sum())
    if choose % total == 0:
        return sizes * (choose // total)
    picks = (sizes + granularity - 1) // granularity
    pick_shard = np.repeat(np.arange(len(sizes)), picks)
    pick_len = np.full(int(picks.sum()), granularity, np.int64)
    pick_len[np.cumsum(picks) - 1] = sizes - (picks - 1) * granularity
    order = np.random.default_rng(seed + epoch if use_epoch else seed).permutation(len(pick_len))
    out = sizes * (choose // total)
    left = choose % total
    for pick in order:
        take = min(left, int(pick_len[pick]))
        out[pick_shard[pick]] += take
        left -= take
        if not left:
            break
    return out


def resample(
    streams: Sequence[I64],
    chosen: Sequence[int],
    granularity: int,
    seed: int,
    epoch: int,
    use_epoch: bool,
    balanced: bool | None = None,
) -> tuple[I64, I64]:
    """The reference's shuffle units (per shard: full copies, then the partial one) and the
    sample id of every index-order position (full copies in order, then a sorted random subset
    drawn from ``default_rng(seed [+ epoch])``), over all streams. ``use_epoch``: the per-shard
    counts change per epoch (shuffle and balanced); ``balanced``: the subsets do (default:
    ``use_epoch``)."""
    balanced = use_epoch if balanced is None else balanced
    rng = np.random.default_rng(seed + epoch if balanced else seed)
    units: list[int] = []
    ids: list[I64] = []
    offset = 0
    for sizes, choose in zip(streams, chosen):
        per_shard = shard_choices(sizes, int(choose), granularity, seed, epoch, use_epoch)
        for n, c in zip(np.asarray(sizes, np.int64).tolist(), per_shard.tolist()):
            full, part = divmod(c, n) if n else (0, 0)
            units += [n] * full + ([part] if part else [])
            ids += [offset + np.arange(n, dtype=np.int64)] * full
            if part:
                ids.append(np.sort(offset + rng.choice(n, part, False)))
            offset += n
    flat = np.concatenate(ids).astype(np.int64, copy=False) if ids else np.zeros(0, np.int64)
    return np.array(units, np.int64), flat


def get_shuffle(
    algo: str,
    shard_sizes: Sequence[int] | NDArray[np.int64],
    num_canonical_nodes: int,
    seed: int,
    epoch: int,
    block_size: int = 1 << 18,
    *,
    compact: bool = False,
) -> I64:
    """The reference's global sample order of one epoch (position -> sample id); int64 as the
    reference's, or with ``compact`` int32 when the ids fit (half the memory)."""
    try:
        fn = REFERENCE_ALGOS[algo]
    except KeyError:
        raise ValueError(f"shuffle_algo={algo!r} is not an algorithm of the reference") from None
    sizes = np.asarray(shard_sizes, np.int64)
    ids = fn(sizes, num_canonical_nodes, seed, epoch, block_size)
    return ids if compact else np.asarray(ids, np.int64)
