"""Token packing, the pure part: cut a stream of token documents into fixed-length sequences.

Theory of operation
-------------------
A *consumer* (one DataLoader worker of one rank, or the process iterating with
``num_workers=0``) reads a fixed *stream* of samples: the planned batches the epoch plan deals
to it from the iteration's start position (``EpochPlan.worker_batches``), less the rank's pad
sample (a repeat the plan adds so that every rank yields the same sample count; packing would
deliver its tokens twice, so it is skipped). :func:`pack_tokens` concatenates the token arrays
of that stream, in order, and cuts the result into sequences of exactly ``seq_len`` tokens.

Each sequence carries three arrays of ``seq_len``:

- the tokens (the column's dtype);
- ``position_ids`` (int64): each token's index inside its document, so 0 at every document
  start; a document cut by a sequence boundary goes on counting in the next sequence;
- ``segment_ids`` (int32): 1, 2, 3 ... for the document pieces of this sequence in order, 0 for
  padding: ``segment_ids[i] == segment_ids[j] != 0`` (and ``j <= i``) is a causal
  block-diagonal attention mask; ``np.bincount`` of it gives the per-document lengths.

After each sequence the packer's place is a *cursor* ``(samples, offset)``: the samples of the
stream wholly used and the tokens already used of the next one. The cursor is the whole state:
starting the same stream at a cursor yields exactly the sequences that follow it, because
sequence boundaries are multiples of ``seq_len`` tokens of the stream and positions are
in-document offsets. The stream's trailing tokens (fewer than ``seq_len``) become one last
sequence padded with ``pad_id`` (``last="pad"``, segment 0, position 0) or are dropped
(``last="drop"``).

:class:`StreamLayout` is the index arithmetic of a stream: its length, whether it holds the
rank's pad sample, and the global position of its ``i``-th sample (the same formula as the
plan's dealing: rank sample ``r`` is position ``start + r * R + slot``, rank batch ``b`` goes to
worker ``b % W``). It lets a checkpoint taken on one World be resumed on another at a global
sample position (see ``astream.packing``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from astream.errors import ConfigError

__all__ = ["PACK_LAST", "PackSpec", "StreamLayout", "check_pack", "pack_tokens", "token_dtype"]

PACK_LAST = ("pad", "drop")
MAX_SEQ_LEN = 1 << 30  # tokens per sequence (one int64 position array of 8 GiB)


@dataclass(frozen=True)
class PackSpec:
    """The packing options of a dataset (``pack_to`` and friends)."""

    seq_len: int
    column: str
    last: str
    pad_id: int

    def to_dict(self) -> dict[str, Any]:
        return {"seq_len": self.seq_len, "column": self.column, "last": self.last,
                "pad_id": self.pad_id}  # fmt: skip


def check_pack(pack_to: Any, pack_column: Any, pack_last: Any, pack_pad_id: Any) -> PackSpec | None:
    """The options, checked (``ConfigError`` naming the argument); None without ``pack_to``.
    The packing arguments other than ``pack_to`` are refused when ``pack_to`` is not given
    rather than silently ignored."""
    if pack_to is None:
        for name, value, default in (
            ("pack_column", pack_column, "input_ids"),
            ("pack_last", pack_last, "pad"),
            ("pack_pad_id", pack_pad_id, 0),
        ):
            if value != default or type(value) is not type(default):
                raise ConfigError(f"{name}={value!r} needs pack_to=<sequence length>")
        return None
    if isinstance(pack_to, bool) or not isinstance(pack_to, (int, np.integer)):
        raise ConfigError(f"pack_to must be an int (tokens per sequence), got {pack_to!r}")
    if not 1 <= int(pack_to) <= MAX_SEQ_LEN:
        raise ConfigError(f"pack_to must be in [1, {MAX_SEQ_LEN}], got {pack_to}")
    if not isinstance(pack_column, str) or not pack_column:
        raise ConfigError(f"pack_column must be a column name, got {pack_column!r}")
    if pack_column in ("position_ids", "segment_ids"):
        raise ConfigError(
            f"pack_column={pack_column!r}: that name is an output column of packing; "
            "rename the token column"
        )
    if pack_last not in PACK_LAST:
        raise ConfigError(f"pack_last must be 'pad' or 'drop', got {pack_last!r}")
    if isinstance(pack_pad_id, bool) or not isinstance(pack_pad_id, (int, np.integer)):
        raise ConfigError(f"pack_pad_id must be an int, got {pack_pad_id!r}")
    return PackSpec(int(pack_to), pack_column, str(pack_last), int(pack_pad_id))


def token_dtype(encodings: Iterable[tuple[str, str]], spec: PackSpec) -> np.dtype[Any] | None:
    """The token dtype from the ``(where, encoding)`` of the column in every shard
    configuration: ``ndarray:INT`` or ``ndarray:INT:N`` (one dimension). ``None`` for a plain
    ``ndarray`` (dtype stored per sample; int64 out, checked per sample). ``ConfigError``
    naming ``pack_column`` for anything else or for dtypes that differ between shards."""
    found: set[str] = set()
    for where, enc in encodings:
        parts = enc.split(":")
        if parts[0] != "ndarray" or len(parts) > 3:
            raise ConfigError(
                f"pack_column={spec.column!r}: {where} stores it as {enc!r}; packing needs an "
                "integer array column (ndarray:int32, ndarray:uint16, ...)"
            )
        if len(parts) == 3 and "," in parts[2]:
            raise ConfigError(
                f"pack_column={spec.column!r}: {where} stores it as {enc!r}, an array of more "
                "than one dimension; packing needs 1-D token arrays"
            )
        if len(parts) == 1:
            found.add("")
            continue
        dt = np.dtype(parts[1])
        if dt.kind not in "iu":
            raise ConfigError(
                f"pack_column={spec.column!r}: {where} stores {enc!r}, not integers; packing "
                "needs token ids (ndarray:int32, ndarray:uint16, ...)"
            )
        found.add(dt.str)
    if not found:
        raise ConfigError(f"pack_column={spec.column!r}: no shard has that column")
    if len(found) > 1:
        raise ConfigError(
            f"pack_column={spec.column!r}: the shards store it with different dtypes "
            f"({sorted(found)}); packing needs one"
        )
    only = found.pop()
    dtype = np.dtype(only) if only else None
    check = dtype if dtype is not None else np.dtype(np.int64)
    info = np.iinfo(check)
    if not info.min <= spec.pad_id <= info.max:
        raise ConfigError(f"pack_pad_id={spec.pad_id} does not fit the tokens' dtype {check}")
    return dtype


def _tokens(doc: Any, column: str) -> np.ndarray[Any, Any]:
    a = np.asarray(doc)
    if a.ndim != 1 or a.dtype.kind not in "iu":
        raise ConfigError(
            f"pack_column={column!r}: a sample holds {a.dtype} of shape {a.shape}; packing "
            "needs a 1-D array of integer token ids"
        )
    return a


CHUNK_TOKENS = 1 << 16  # tokens gathered before sequences are cut, vectorised, from them


def pack_tokens(
    docs: Iterable[Any],
    spec: PackSpec,
    dtype: np.dtype[Any] | None,
    *,
    samples: int = 0,
    offset: int = 0,
    chunk_tokens: int = CHUNK_TOKENS,
) -> Iterator[tuple[dict[str, Any], tuple[int, int]]]:
    """Sequences of the stream whose samples from index ``samples`` on are ``docs`` (token
    arrays), the first of them entered at token ``offset``; each with the cursor after it
    (see the module docstring). ``dtype``: of the tokens out (None: int64).

    Documents are gathered until ``chunk_tokens`` (at least ``seq_len``) tokens wait; then
    every whole sequence among them is cut at once: per token, its value, in-document
    position, document piece number, document index and whether it ends its document, as flat
    arrays; the sequences are rows of those (views), the leftover tokens wait for more."""
    out_dtype = dtype if dtype is not None else np.dtype(np.int64)
    limit = max(spec.seq_len, int(chunk_tokens))
    waiting = _Waiting()
    i = samples
    for d in docs:
        a = _tokens(d, spec.column)
        o = offset if i == samples else 0
        n = len(a)
        if o and o >= n:
            raise ConfigError(
                f"state: token offset {o} is past the {n} tokens of sample {i} of this "
                "consumer's stream (a checkpoint of other data or options)"
            )
        if n > o:
            waiting.add(a[o:] if o else a, o, i)
        i += 1
        if waiting.tokens >= limit:
            yield from waiting.cut(spec, out_dtype)
    if offset and i == samples:
        raise ConfigError(f"state: token offset {offset} into sample {i}, which does not exist")
    if waiting.parts:
        yield from waiting.cut(spec, out_dtype)
        if waiting.tokens and spec.last == "pad":
            yield waiting.padded(spec, out_dtype), (i, 0)


class _Waiting:
    """The document pieces read and not yet cut into sequences: each piece's tokens, the
    in-document position of its first token, and its sample index in the stream."""

    __slots__ = ("begins", "index", "parts", "tokens")

    def __init__(self) -> None:
        self.parts: list[np.ndarray[Any, Any]] = []
        self.begins: list[int] = []
        self.index: list[int] = []
        self.tokens = 0

    def add(self, piece: np.ndarray[Any, Any], begin: int, sample: int) -> None:
        self.parts.append(piece)
        self.begins.append(begin)
        self.index.append(sample)
        self.tokens += len(piece)

    def cut(
        self, spec: PackSpec, out_dtype: np.dtype[Any]
    ) -> Iterator[tuple[dict[str, Any], tuple[int, int]]]:
        """Every whole sequence of the waiting tokens, at once; the leftover keeps waiting."""
        n_out = spec.seq_len
        parts, begins = self.parts, self.begins
        sizes = _sizes(parts)
        ends = np.cumsum(sizes)
        first = ends - sizes
        whole = self.tokens // n_out
        m = whole * n_out
        if not whole:
            return
        tok = np.concatenate(parts)[:m].astype(out_dtype, copy=False).reshape(whole, n_out)
        k_last = int(np.searchsorted(ends, m, side="left"))  # pieces touched: 0..k_last
        sz = sizes[: k_last + 1]
        shift = np.repeat(first[: k_last + 1] - np.asarray(begins[: k_last + 1]), sz)
        pos = (np.arange(m, dtype=np.int64) - shift[:m]).reshape(whole, n_out)
        pid = np.repeat(np.arange(k_last + 1, dtype=np.int32), sz)[:m].reshape(whole, n_out)
        seg = pid - pid[:, :1] + 1
        e = np.arange(1, whole + 1, dtype=np.int64) * n_out
        k = np.searchsorted(ends, e, side="left")  # the piece holding token e - 1
        at_end = ends[k] == e  # every piece runs to its document's end
        idx = np.asarray(self.index, dtype=np.int64)[k]
        cur_doc = np.where(at_end, idx + 1, idx).tolist()
        cur_off = np.where(at_end, 0, np.asarray(begins)[k] + e - first[k]).tolist()
        for j in range(whole):
            item = {spec.column: tok[j], "position_ids": pos[j], "segment_ids": seg[j]}
            yield item, (cur_doc[j], cur_off[j])
        # the leftover: the rest of the piece holding token m, and the pieces after it
        k0 = int(np.searchsorted(ends, m, side="right"))
        if k0 < len(parts):
            cut_at = m - int(first[k0])
            self.parts = [parts[k0][cut_at:], *parts[k0 + 1 :]]
            self.begins = [begins[k0] + cut_at, *begins[k0 + 1 :]]
        else:
            self.parts, self.begins = [], []
        self.index = self.index[k0:]
        self.tokens -= m

    def padded(self, spec: PackSpec, out_dtype: np.dtype[Any]) -> dict[str, Any]:
        """The last sequence: the waiting tokens (fewer than ``seq_len``), then padding."""
        n_out, parts, fill = spec.seq_len, self.parts, self.tokens
        t = np.full(n_out, spec.pad_id, dtype=out_dtype)
        t[:fill] = np.concatenate(parts)
        p = np.zeros(n_out, np.int64)
        p[:fill] = np.concatenate([np.arange(b, b + len(a)) for a, b in zip(parts, self.begins)])
        g = np.zeros(n_out, np.int32)
        g[:fill] = np.repeat(np.arange(1, len(parts) + 1, dtype=np.int32), _sizes(parts))
        return {spec.column: t, "position_ids": p, "segment_ids": g}


def _sizes(parts: list[np.ndarray[Any, Any]]) -> np.ndarray[Any, Any]:
    return np.fromiter((len(a) for a in parts), np.int64, len(parts))


class StreamLayout:
    """Index arithmetic of the stream of ``stream`` (a worker slot) of ``rank`` in ``plan``
    dealt to ``world`` from ``start`` (see the module docstring)."""

    def __init__(self, plan: Any, world: Any, rank: int, stream: int, start: int) -> None:
        if plan.batching_method == "device_per_stream":
            raise ConfigError(
                "batching_method='device_per_stream' cannot be packed (its padding repeats "
                "whole batches); use 'random', 'stratified' or 'per_stream' with pack_to"
            )
        world.check_rank(rank)
        world.check_worker(stream)
        first, total = plan.dealt_span(world, start)  # a reference layout rounds and widens
        self.start = int(first)
        self.num_samples = int(total)
        self.ranks = world.num_ranks
        self.workers = world.workers_per_rank
        node, local = divmod(rank, world.ranks_per_node)
        self.slot = node + world.num_nodes * local
        self.bs = int(plan.batch_size)
        self.stream = stream
        c = int(plan.rank_num_samples(world, rank, start))  # rank samples, pad included
        nb = -(-c // self.bs)
        mine = range(stream, nb, self.workers)
        length = len(mine) * self.bs
        if len(mine) and mine[-1] == nb - 1:
            length -= nb * self.bs - c  # the rank's last batch is short
        last = c - 1
        self.has_pad = (
            c > 0
            and self.start + last * self.ranks + self.slot >= self.num_samples
            and (last // self.bs) % self.workers == stream
        )
        self.length = length - int(self.has_pad)  # samples of the stream, pad excluded

    def position(self, i: int) -> int:
        """Global position of the stream's sample ``i``; ``num_samples`` when past its end."""
        if i >= self.length:
            return self.num_samples
        q, e = divmod(i, self.bs)
        r = (self.stream + q * self.workers) * self.bs + e
        return int(self.start + r * self.ranks + self.slot)
