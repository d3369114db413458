"""The reference's (mosaicml-streaming 0.13.0) partition and per-stream batching, as whole
arrays, reproduced bit for bit.

Used for ``batching_method`` ``stratified`` / ``per_stream`` / ``device_per_stream`` under a
reference algorithm, and for the reference's "relaxed" re-deal: each function returns the
reference's "work" array (physical nodes, ranks per node, workers per rank, batches per worker,
batch size) of index positions or global sample ids, -1 where there is none. The shuffles it
maps through are :mod:`astream.core.refshuffle`'s. Pure numpy; nothing here does I/O.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from astream.core.refshuffle import I64, canonical_index, canonical_layout, get_shuffle

__all__ = ["batching_work", "partition", "partition_orig", "stratum_portions"]

_log = logging.getLogger(__name__)


def _warn_dropped(method: str, s: int) -> None:
    _log.warning(
        "batching_method=%r: stream %d (streams[%d]) leaves a short batch, which is dropped",
        method, s, s,
    )  # fmt: skip


def _warn_resume(method: str, start: int, gbs: int) -> None:
    """Resuming inside a global batch restarts at the last whole one, as the reference
    does; it says so with ``warnings.warn`` for ``stratified``, with its logger otherwise."""
    text = (
        f"batching_method={method!r} resumes only at a multiple of the global batch size "
        f"{gbs}: sample {start} resumes after the last whole global batch"
    )
    if method == "stratified":
        warnings.warn(text, stacklevel=4)
    else:
        _log.warning(text)


def partition_orig(n: int, ncn: int, pn: int, rpn: int, workers: int, bs: int, drop: int) -> I64:
    """Index-order positions dealt to every (node, rank, worker, batch, slot), -1 fillers."""
    if (ncn < pn and pn % ncn) or (pn < ncn and ncn % pn):
        raise ValueError(f"num_canonical_nodes={ncn} and num_nodes={pn}: one must divide the other")
    drop -= drop % pn
    width = canonical_layout(n, ncn, pn)[0]
    total = ncn * width
    flat = canonical_index(n, ncn, pn, np.arange(min(drop, total), total, dtype=np.int64))
    ids = flat.reshape(-1, pn).T  # (nodes, samples per node)
    length = ids.shape[1]
    over = length % rpn
    if over:
        short = rpn - over
        if rpn + short - 1 <= length:
            extra = ids[:, length - rpn - short + 1 : length - rpn + 1]
        else:
            extra = np.concatenate([np.tile(ids, short // length), ids[:, : short % length]], 1)
        ids = np.concatenate([ids, extra], 1)
    ranks: I64 = ids.reshape(pn, -1, rpn)
    per_rank = ranks.shape[1]
    rounded = -(-per_rank // (workers * bs)) * (workers * bs)
    if rounded > per_rank:
        ranks = np.concatenate([ranks, np.full((pn, rounded - per_rank, rpn), -1, np.int64)], 1)
    dealt = ranks.transpose(0, 2, 1).reshape(pn, rpn, -1, workers, bs)
    out: I64 = dealt.transpose(0, 1, 3, 2, 4)
    return out


def partition(
    algo: str,
    n: int,
    ncn: int,
    pn: int,
    rpn: int,
    workers: int,
    bs: int,
    drop: int = 0,
    initial_nodes: int | None = None,
) -> I64:
    """The reference's ``get_partitions`` (``orig``, or ``relaxed``: re-deals the initial
    World's partition when resuming on a World whose nodes do not divide the canonical ones)."""
    if algo not in ("orig", "relaxed"):
        raise ValueError(f"partition_algo={algo!r}: the reference has 'orig' and 'relaxed'")
    devices = pn * rpn
    if n + (devices - n % devices) < drop:
        raise ValueError(f"resuming at {drop}, past the epoch's {n} samples")
    if algo == "orig":
        return partition_orig(n, ncn, pn, rpn, workers, bs, drop)
    if initial_nodes is None or (pn <= ncn and ncn % pn == 0) or (pn > ncn and pn % ncn == 0):
        return partition_orig(n, ncn, pn, rpn, workers, bs, drop)
    gbs = pn * rpn * bs
    if gbs % (initial_nodes * rpn):
        raise ValueError(
            f"global batch {gbs} is not a multiple of the initial {initial_nodes * rpn} ranks"
        )
    first = partition_orig(n, ncn, initial_nodes, rpn, workers, gbs // (initial_nodes * rpn), drop)
    flat = first.transpose(3, 2, 0, 1, 4).ravel()
    out: I64 = flat.reshape(-1, workers, pn, rpn, bs).transpose(2, 3, 1, 0, 4)
    return out


def _stream_ids(
    part: I64, units: I64, small: I64, shuffle: bool, algo: str, ncn: int, seed: int,
    epoch: int, block: int,
) -> I64:  # fmt: skip
    """A stream's partition of index positions mapped through its shuffle and resampling."""
    if shuffle:
        perm = get_shuffle(algo, units, ncn, seed, epoch, block)
        part = np.where(part != -1, perm[part], -1)
    out: I64 = np.where(part != -1, small[part], -1)
    return out


def stratum_portions(gbs: int, proportions: Sequence[float] | NDArray[np.float64]) -> I64:
    """Each stream's share of a global batch of ``gbs`` samples, as the reference's
    ``stratified`` batching rounds it: ``int(gbs * p)`` each (``p``: the stream's proportion
    of the epoch, normalised), then one more to as many streams as samples are missing, in
    descending order of the fractional parts (numpy's ``argsort``, reversed: of equal parts,
    the later stream first). A share may be 0; the caller decides whether that is an error."""
    props = np.asarray(proportions, np.float64)
    portions = np.array([int(p * gbs) for p in props.tolist()], np.int64)
    missing = gbs - int(portions.sum())
    if missing:  # (as the reference, also when negative: a float sum just above 1)
        left = gbs * props - portions
        portions[np.flip(np.argsort(left))[:missing]] += 1
    return portions


def _stream_order(counts: list[int], seed: int) -> I64:
    """Indices into the streams' concatenated batches, in the reference's drawn stream order."""
    origins = np.concatenate([np.full(c, i) for i, c in enumerate(counts)])
    np.random.default_rng(seed).shuffle(origins)
    index = np.zeros(origins.shape[0], np.int64)
    offset = 0
    for i, c in enumerate(counts):
        index[origins == i] += offset + np.arange(c)
        offset += c
    return index


def _finish(batches: I64, start: int, gbs: int, pn: int, rpn: int, workers: int, bs: int) -> I64:
    """Drop the global batches before ``start``, pad whole -1 batches, deal as the reference."""
    batches = batches.reshape(-1, gbs)[start // gbs :]
    need = pn * rpn * workers * bs
    if batches.size % need:
        pad = (need - batches.size % need) // gbs
        batches = np.concatenate([batches, np.full((pad, gbs), -1, np.int64)])
    out: I64 = batches.reshape(-1, workers, pn, rpn, bs).transpose(2, 3, 1, 0, 4)
    return out


def batching_work(
    method: str,
    streams: Sequence[tuple[I64, I64]],
    proportions: NDArray[np.float64],
    *,
    shuffle: bool,
    algo: str,
    seed: int,
    epoch: int,
    block: int,
    ncn: int,
    pn: int,
    rpn: int,
    workers: int,
    bs: int,
    start: int,
    epoch_seed_change: bool,
    partition_algo: str = "relaxed",
    initial_nodes: int | None = None,
) -> I64:
    """The reference's ``generate_work_{stratified,per_stream,device_per_stream}_batching``.

    ``streams``: per stream, its shuffle units and the global sample id of each of its
    index-order positions (the reference's ``resample_streams(epoch, stream_id)``);
    ``proportions``: each stream's share of the epoch as the reference stores it
    (``Stream.proportion`` after ``apply_weights``). Raises ``ValueError`` where the reference
    raises.
    """
    gbs = bs * rpn * pn
    seed_order = seed + epoch if epoch_seed_change else seed
    parts = []
    for s, (units, small) in enumerate(streams):
        part = _stream_part(
            method, s, units, small, proportions[s], shuffle=shuffle, algo=algo, seed=seed,
            epoch=epoch, block=block, ncn=ncn, pn=pn, rpn=rpn, workers=workers, bs=bs,
            partition_algo=partition_algo, initial_nodes=initial_nodes,
        )  # fmt: skip
        parts.append(part)
    if method == "stratified":
        batches = _stratified(parts, proportions, gbs)
    elif method == "per_stream":
        batches = _per_stream(parts, gbs, seed_order)
    else:
        batches = _device_per_stream(parts, ncn, pn, rpn, bs, seed_order)
    if start % gbs:
        _warn_resume(method, start, gbs)
    return _finish(batches, start, gbs, pn, rpn, workers, bs)


def _stream_part(
    method: str, s: int, units: I64, small: I64, proportion: np.float64, *, shuffle: bool,
    algo: str, seed: int, epoch: int, block: int, ncn: int, pn: int, rpn: int, workers: int,
    bs: int, partition_algo: str, initial_nodes: int | None,
) -> I64:  # fmt: skip
    """Stream ``s``'s partition as ``method`` cuts it, mapped to global sample ids."""
    n = len(small)
    portion_block = int(block * proportion)
    if method == "stratified":
        part = partition(partition_algo, n, ncn, 1, rpn, workers, 1, 0, initial_nodes)
    elif method == "per_stream":
        part = partition(partition_algo, n, ncn, pn, rpn, workers, bs, 0, initial_nodes)
    else:
        if ncn % pn:
            raise ValueError(
                f"device_per_stream needs num_canonical_nodes ({ncn}) divisible by the "
                f"physical nodes ({pn})"
            )
        part = partition(partition_algo, n, ncn, ncn, rpn, workers, 1, 0, initial_nodes)
        if shuffle and portion_block == 0:
            raise ValueError(
                f"streams[{s}]: shuffle_block_size={block} x its proportion "
                f"{float(proportion)} rounds to a block of 0 samples"
            )
    return _stream_ids(part, units, small, shuffle, algo, ncn, seed, epoch, portion_block)


def _stratified(parts: list[I64], proportions: NDArray[np.float64], gbs: int) -> I64:
    """Global batches of every stream's portion, as many as the shortest stream fills."""
    portions = stratum_portions(gbs, proportions)
    for s, k in enumerate(portions.tolist()):
        if k <= 0:
            raise ValueError(f"streams[{s}]: its share of a global batch of {gbs} samples is {k}")
    rows = []
    for part, k in zip(parts, portions.tolist()):
        flat = part.transpose(3, 2, 0, 1, 4).ravel()
        if flat.size % k:
            flat = np.concatenate([flat, np.full(k - flat.size % k, -1, np.int64)])
        rows.append(flat.reshape(-1, k))
    whole = [int(np.count_nonzero(r.min(axis=1) >= 0)) for r in rows]
    for s, (r, n) in enumerate(zip(rows, whole)):
        if n != len(r):
            _warn_dropped("stratified", s)
    full = min(whole)
    out: I64 = np.concatenate([r[:full] for r in rows], axis=1)
    return out


def _per_stream(parts: list[I64], gbs: int, seed_order: int) -> I64:
    """Each stream's whole global batches, in the reference's drawn stream order."""
    chunks, counts = [], []
    for s, part in enumerate(parts):
        inorder = part.transpose(3, 2, 0, 1, 4).reshape(-1, gbs)
        full = int(np.count_nonzero(inorder.min(axis=1) >= 0))
        if full != len(inorder):
            _warn_dropped("per_stream", s)
        if full == 0:
            raise ValueError(f"streams[{s}] does not fill one global batch of {gbs}")
        counts.append(full)
        chunks.append(inorder[:full])
    out: I64 = np.concatenate(chunks)[_stream_order(counts, seed_order)]
    return out


def _device_per_stream(
    parts: list[I64], ncn: int, pn: int, rpn: int, bs: int, seed_order: int
) -> I64:
    """Per physical node, each stream's whole device batches in a drawn stream order (one
    generator for all nodes, node after node), padded to the same count with -1 batches."""
    per_node = ncn // pn
    node_batches, node_counts = [], []
    for node in range(pn):
        mine, counts = [], []
        for s, part in enumerate(parts):
            flat = part[node * per_node : (node + 1) * per_node].transpose(3, 2, 0, 1, 4).ravel()
            flat = np.concatenate([flat, np.full(bs - flat.size % bs, -1, np.int64)])
            cut = flat.reshape(-1, bs)
            full = int(np.count_nonzero(cut.min(axis=1) >= 0))
            if np.count_nonzero(cut[full:] >= 0):  # (the reference warns at every stream)
                _warn_dropped("device_per_stream", s)
            if full == 0:
                raise ValueError(f"streams[{s}] does not fill one device batch of {bs}")
            counts.append(full)
            mine.append(cut[:full])
        node_batches.append(np.concatenate(mine))
        node_counts.append(counts)
    most = max(len(b) for b in node_batches)
    most += rpn * pn - most % (rpn * pn)
    rng = np.random.default_rng(seed_order)
    for node in range(pn):
        counts = node_counts[node]
        origins = np.concatenate([np.full(c, i) for i, c in enumerate(counts)])
        rng.shuffle(origins)
        index = np.zeros(origins.shape[0], np.int64)
        offset = 0
        for i, c in enumerate(counts):
            index[origins == i] += offset + np.arange(c)
            offset += c
        b = node_batches[node][index]
        node_batches[node] = np.concatenate([b, np.full((most - len(b), bs), -1, np.int64)])
    out: I64 = np.stack(node_batches, axis=1).reshape(-1, bs)
    return out
