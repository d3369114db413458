"""Turning planned sample ids into decoded samples, one process at a time.

Theory of operation
-------------------
A consumer (one DataLoader worker, or the main process) gets its batches of global sample ids
from the epoch plan. For each batch it groups the ids by shard, in order of first appearance,
opens each shard once (memory-mapped, zero copy), decodes that shard's samples into their
slots, and hands the batch out in planned order.

Open shards are kept in an LRU. Without a ``cache_limit`` nothing is ever evicted, so no pin
is needed and at least ``keep_open`` shards stay mapped. The LRU follows the working set: a
shard reopened soon after the LRU closed it (it is still in the list of recently closed shards)
raises the limit by one, up to ``max_open`` shards and, past ``keep_open``, ``max_open_bytes``
of mapped files. So an epoch whose batches each span more shards than ``keep_open`` maps each
shard a few times, not once per batch (``stats.shard_maps`` counts the maps). Memory stays
where it was: only the ``keep_open`` most recently read shards keep their touched pages
mapped; an older one has them unmapped (``madvise``; the page cache keeps them) and faults
them back in if it is read again.

An iteration's opener also bounds the bytes of the shards it reads through the map
(``map_limit``: this process's share of the dataset's ``map_memory``). A shard that enters the
window of recently read shards while the mapped ones in it already fill the limit is read by
copy (``OpenShard.by_copy``: one ``pread`` per sample; the columnar decoder unmaps the pages
its table build touched and reads every value with ``preadv``) until it leaves the window. An
order that reads every shard all epoch long (py1e at the reference's block) then keeps the
limit mapped, not the whole dataset; an order that moves through the dataset (index order,
astream's block order) reads few shards at a time and copies few of them. Copying costs a
system call per sample; the samples are the same either way. Under a
``cache_limit`` only one shard is open at a time: it is read by copy when it alone is larger
than the limit.

With a ``cache_limit``, an open shard is pinned (a shared flock, see ``cache.py``) and the
consumer holds **at most one** pin: it drops every other shard before it opens a new one (the
LRU stays at one shard and never grows). A consumer that waits for room therefore holds
nothing anyone else waits for, which is what makes the node-wide cache deadlock-free.

Split-format shards (json/csv/tsv/xsv) go the same way: the data file is what is mapped,
pinned and decoded (one line per sample, ``SplitDecoder``); its offsets come from the meta
file, a cache file of its own that the fetcher brings first and that is read once per process.
MDS shards never touch that code: their decode path is unchanged.

Misses: the prefetcher (``prefetch.py``) has usually started the download already and the
consumer waits on that future; otherwise it downloads on demand. Either way the wait is timed
into ``stats.wait_seconds``.

The handles of open shards are in ``shard_handles.py``; batches are grouped by shard in
``batch_groups.py``.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

try:
    import resource
except ImportError:  # pragma: no cover - not on Linux/macOS
    resource = None  # type: ignore[assignment]

from astream.core.index import ShardEntry
from astream.core.shard import SampleDecoder, ShardView, check_config, header_size
from astream.core.splitformats import SplitDecoder, split_offsets
from astream.errors import FormatError, IntegrityError
from astream.runtime.batch_groups import Groups
from astream.runtime.cache import CacheSpace
from astream.runtime.catalog import Catalog
from astream.runtime.fetch import _hash_file
from astream.runtime.locks import FileLock
from astream.runtime.shard_handles import OpenShard
from astream.runtime.stats import Stats
from astream.runtime.versions import Versions

__all__ = ["ShardOpener", "decode_batch"]


DROP_SAMPLE_BYTES = 32 << 10  # ShardOpener.drop_read: shards whose samples average this
_PAIR = struct.Struct("<II")
# distinct shard configs known good per process, at most (a dataset's shards share one)
_CONFIGS_KEPT = 1024


def _layout(e: ShardEntry) -> tuple[Any, ...]:
    """What a decoder of a shard depends on, and all its config is checked against."""
    return (e.format, e.separator, e.newline, tuple(e.column_names),
            tuple(e.column_encodings), tuple(e.column_sizes))  # fmt: skip


def _nofile() -> int:
    if resource is None:  # pragma: no cover - not on Linux/macOS
        return 1024
    try:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (OSError, ValueError):  # pragma: no cover
        return 1024
    return soft if soft > 0 else 1 << 20


class _MetaMissing(Exception):
    """A split shard's meta file is not in the cache (never fetched, or evicted)."""


def _split_meta_offsets(catalog: Catalog, s: int, algo: str | None) -> Sequence[int]:
    meta = catalog.shards[s].meta
    assert meta is not None
    path = meta.files.raw_path
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise _MetaMissing(path) from None
    if len(data) != meta.files.raw_size:
        raise _MetaMissing(path)  # a partial copy never has its final name: a stale one
    want = meta.raw_hashes.get(algo) if algo is not None else None
    if want is not None and algo is not None:
        got = _hash_file(algo, path)
        if got != want:
            raise IntegrityError(
                f"{algo} of the cached meta file {path} is {got}, index says {want}"
            )
    return split_offsets(data, catalog.entries[s], path)


def _validated_offsets(path: str, catalog: Catalog, s: int) -> Sequence[int]:
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            raise FormatError("shard file is empty", path)
        err: FormatError | None = None
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            try:
                view = ShardView(mm, catalog.entries[s], path)
            except FormatError as exc:
                # the traceback's frames hold views of the map: drop them so that the map can
                # close and the FormatError (not a BufferError) reaches the caller
                err = exc.with_traceback(None)
            else:
                offsets = view._offsets  # compact (see ShardView): nothing for the GC to scan
                view.release()
        if err is not None:
            raise err
    return offsets


def _check_cached(path: str, catalog: Catalog, s: int, algo: str | None) -> Sequence[int]:
    """Offsets of a cached shard after its structural checks and, with ``algo``, its hash."""
    if catalog.entries[s].format == "parquet":
        return [0, catalog.shards[s].files.raw_size]  # a row group: checked when decoded
    if catalog.shards[s].meta is not None:
        offsets = _split_meta_offsets(catalog, s, algo)
    else:
        offsets = _validated_offsets(path, catalog, s)
    want = catalog.shards[s].raw_hashes.get(algo) if algo is not None else None
    if want is not None and algo is not None:
        got = _hash_file(algo, path)
        if got != want:
            raise IntegrityError(f"{algo} of the cached shard {path} is {got}, index says {want}")
    return offsets


class ShardOpener:
    """Opens shards for one consumer, fetching misses through ``ensure``."""

    def __init__(
        self,
        catalog: Catalog,
        space: CacheSpace,
        stats: Stats,
        *,
        allow_unsafe_types: bool,
        keep_open: int = 16,
        max_open: int = 256,
        max_open_bytes: int = 4 << 30,
        validate_hash: str | None = None,
        versions: Versions | None = None,
        map_limit: int | None = None,
    ) -> None:
        self.catalog = catalog
        self.space = space
        self.versions = versions  # this process's (see runtime/versions.py)
        self.stats = stats
        self.allow_unsafe_types = allow_unsafe_types
        self.pinning = space.limit is not None
        self.keep_open = 1 if self.pinning else max(1, keep_open)
        self._base = self.keep_open
        # a mapped shard holds no descriptor, but the columnar decoder's preadv opens one per
        # shard: stay well inside the process's descriptor limit
        self.max_open = max(self._base, min(max_open, _nofile() // 4))
        self.max_open_bytes = max_open_bytes
        self._open_bytes = 0
        self._closed: OrderedDict[int, None] = OrderedDict()  # recently closed by the LRU
        self._hot: OrderedDict[int, None] = OrderedDict()  # the _base most recently read
        # None, or the bytes of the shards in ``_hot`` read through the map, at most: a shard
        # entering ``_hot`` past it is read by copy (``OpenShard.by_copy``) while it stays
        self.map_limit = map_limit
        self._mapped = 0  # bytes of the shards in ``_hot`` read through the map
        self._open: OrderedDict[int, OpenShard] = OrderedDict()
        self._decoders: dict[tuple[Any, ...], SampleDecoder | SplitDecoder] = {}
        self._offsets: dict[int, Sequence[int]] = {}
        self.validate_hash = validate_hash
        self._dropped: set[int] = set()  # cached copies found corrupt and deleted (once each)
        self._big: dict[int, int] = {}  # shard -> see big()
        self._heads: dict[int, tuple[str, int, int, int, Any]] = {}  # shard -> see _head()
        self._mapped_only: set[int] = set()  # shards that read_unmapped never reads
        # (config bytes, layout) pairs whose config agreed with the index (``_head``)
        self._configs_ok: set[tuple[bytes, tuple[Any, ...]]] = set()

    def decoder(self, s: int, entry: ShardEntry | None = None) -> SampleDecoder | SplitDecoder:
        """The decoder of shard ``s``'s layout (one per layout and process); ``entry`` is its
        index entry when the caller has it."""
        e = self.catalog.entries[s] if entry is None else entry
        key = _layout(e)
        dec = self._decoders.get(key)
        if dec is None:
            src = self.catalog.shards[s].url()
            if e.format == "mds":
                dec = SampleDecoder(e, self.allow_unsafe_types, src)
            else:
                dec = SplitDecoder(e, src)
            self._decoders[key] = dec
        return dec

    def cached(self, s: int) -> OpenShard | None:
        h = self._open.get(s)
        if h is not None:
            self._open.move_to_end(s)
            self._touch(s)
        return h

    def _touch(self, s: int) -> None:
        """``s`` is read now. Only the ``_base`` most recently read shards keep the pages they
        touched mapped: a shard leaving that window has them unmapped (they stay in the page
        cache), so a larger LRU costs maps, not memory. With a ``map_limit``, a shard that
        enters the window while the shards in it read through the map already hold that many
        bytes is read by copy until it leaves, so an order that reads every shard all epoch
        long (py1e at the reference's block) keeps at most the limit mapped."""
        hot = self._hot
        if s in hot:
            hot.move_to_end(s)
            return
        hot[s] = None
        if self.map_limit is not None:
            self._choose_map(s)
        if len(hot) > self._base:
            old, _ = hot.popitem(last=False)
            self._unmap(old)

    def _choose_map(self, s: int) -> None:
        """Shard ``s`` enters the window: through the map if it fits under ``map_limit``."""
        h = self._open.get(s)
        if isinstance(h, OpenShard):
            size = self.catalog.shards[s].files.raw_size
            assert self.map_limit is not None
            h.by_copy = self._mapped + size > self.map_limit
            if h.by_copy:
                self.stats.shard_copies += 1
            else:
                self._mapped += size

    def _uncount(self, s: int, h: Any) -> None:
        """Shard ``s`` (handle ``h``) left the window: its bytes no longer count as mapped."""
        if isinstance(h, OpenShard) and self.map_limit is not None and not h.by_copy:
            self._mapped -= self.catalog.shards[s].files.raw_size

    def _unmap(self, s: int) -> None:
        """Shard ``s`` left the window: unmap the pages it touched, stop counting it."""
        h = self._open.get(s)
        if h is None:
            return
        self._uncount(s, h)
        drop = getattr(h, "drop_pages", None)
        if drop is not None:
            drop()

    def idle(self, s: int) -> None:
        """The consumer's lookahead holds no batch that reads ``s``: unmap the pages of ``s``
        touched so far (they stay in the page cache; a later read faults them back in), so a
        shard the epoch is done with stops counting in this process's memory while it stays
        open. See ``prefetch.Lookahead``."""
        h = self._open.get(s)
        if h is None or s not in self._hot:
            return  # closed, or already unmapped by ``_touch``
        del self._hot[s]
        self.stats.shard_drops += 1
        self._unmap(s)

    def big(self, s: int) -> int:
        """0, or how shard ``s``'s pages leave the map while it is read, when its samples
        average at least ``DROP_SAMPLE_BYTES``: a read of one sample maps far more than the
        sample (the kernel maps the cached pages around a fault, up to whole large folios),
        so without this most of a shard is mapped after a few samples. A large sample is read
        once per epoch and spans its own pages, so the shard's pages are unmapped as soon as a
        batch's samples of it are decoded (1), and once more after the batch is handed out
        (2) when the decoded values are views of the map (ndarray columns), which the caller's
        collate reads back in. Small samples share pages with unread neighbours: their shards
        are released whole by :meth:`idle`."""
        kind = self._big.get(s)
        if kind is None:
            e = self.catalog.entries[s]
            kind = 0
            if self.catalog.shards[s].files.raw_size >= DROP_SAMPLE_BYTES * max(1, e.samples):
                views = any(str(c).startswith("ndarray") for c in e.column_encodings)
                kind = 2 if views else 1
            self._big[s] = kind
        return kind

    def drop_read(self, groups: Groups) -> None:
        """The batch ``groups`` is done (handed out, its samples collated): unmap the pages of
        its shards whose decoded values were views of the map (see :meth:`big`)."""
        for s, _, _ in groups:
            h = self._open.get(s)
            if h is not None and self.big(s) == 2 and not getattr(h, "by_copy", False):
                drop = getattr(h, "drop_pages", None)
                if drop is not None:
                    drop()

    def release_all(self) -> None:
        while self._open:
            _, h = self._open.popitem(last=False)
            self._pin_note(h, -1)
            h.close()
        self._open_bytes = 0
        self._mapped = 0
        self._hot.clear()

    def _evict(self) -> None:
        """Close least recently used shards down to the limits; remember what was closed."""
        while len(self._open) > self.keep_open or (
            len(self._open) > self._base and self._open_bytes > self.max_open_bytes
        ):
            s, old = self._open.popitem(last=False)
            if s in self._hot:
                del self._hot[s]
                self._uncount(s, old)  # closed below: no pages to drop
            self._open_bytes -= self.catalog.shards[s].files.raw_size
            self._pin_note(old, -1)
            old.close()
            if not self.pinning:
                self._closed[s] = None
                if len(self._closed) > self.max_open:
                    self._closed.popitem(last=False)

    def _pin_note(self, h: OpenShard, delta: int) -> None:
        if h._pin is not None:
            self.space.note_pin(h._pin.path, delta)

    def _check_version(self, s: int) -> None:
        """A shard this process read by ranges is the version it read (when its file says);
        so is every other such shard whose file has appeared since (``Versions.sweep``)."""
        shard = self.catalog.shards[s]
        if self.versions is None:
            return
        self.versions.sweep()
        if shard.remote is None or shard.etag is not None:
            return
        if shard.zip_key is None:  # a compressed shard is never read by ranges
            key = (shard.remote, shard.raw_key)
            self.versions.check_file(shard.files.raw_path, key, shard.url())

    def read_unmapped(self, s: int, li: int) -> dict[str, Any] | None:
        """Sample ``li`` of shard ``s``, decoded from its bytes read from its cached file with
        ``pread`` (the sample's two offsets, then its bytes) without opening the shard: what
        random access does with a shard it has not opened. Opening maps the shard and checks its
        whole offsets table, hundreds of microseconds for a cold shard of tens of thousands
        of samples, which a few random reads would pay each time they reach a new shard.

        Only for a complete, uncompressed, unsplit MDS file that needs no pin (no
        ``cache_limit``) and no hash check. The checks are those this read depends on: the
        file's size and sample count are the index's and its config agrees with the index
        (once per shard and process), and the two offsets lie in order between the end of
        the header and the end of the file, which holds all the bytes between them. None
        whenever any of this does not hold: the caller then opens the shard, whose full
        checks raise the precise error (or delete a corrupt cached copy and fetch it
        again)."""
        head = self._heads.get(s)
        entry = None
        if head is None:
            if self.pinning or s in self._mapped_only:
                return None
            entry = self._unmappable(s)
            if entry is None:
                return None
            path = self.catalog.shards[s].files.raw_path
        elif not 0 <= li < head[2]:
            return None
        else:
            path = head[0]
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            if head is None:  # the shard's first read here: its checks share this open
                assert entry is not None
                head = self._head(s, entry, fd)
                if head is None or not 0 <= li < head[2]:
                    return None
            self._check_version(s)
            _, size, _, first, decode = head
            a, b = _PAIR.unpack(os.pread(fd, 8, 4 + 4 * li))
            if not first <= a <= b <= size:
                return None
            data = os.pread(fd, b - a, a)
        except (OSError, struct.error):
            return None
        finally:
            os.close(fd)
        if len(data) != b - a:
            return None
        try:
            return decode(memoryview(data))  # type: ignore[no-any-return]
        except FormatError:  # e.g. a span over two samples: the open's checks say why
            return None

    def _unmappable(self, s: int) -> ShardEntry | None:
        """The index entry of shard ``s`` when :meth:`read_unmapped` may read it at all: an
        MDS file of one piece with no hash to check (else None, and it is remembered as
        mapped only). An entry is built on each ask (the index keeps columns): asked once."""
        shard = self.catalog.shards[s]
        entry = self.catalog.entries[s]
        if (
            entry.format != "mds"
            or shard.meta is not None
            or (shard.validate_hash or self.validate_hash) is not None
        ):
            self._mapped_only.add(s)
            return None
        return entry

    def _head(self, s: int, entry: ShardEntry, fd: int) -> tuple[str, int, int, int, Any] | None:
        """(path, size, samples, first sample offset, decode) of shard ``s`` for
        :meth:`read_unmapped`, after the checks of its file (open as ``fd``) that do not read
        its offsets table: its size, its sample count and its config. Kept once they pass;
        None (checked again next time) while the file does not pass. A config is parsed once
        per process and layout: every shard of a dataset has the same bytes there."""
        files = self.catalog.shards[s].files
        path, size, n = files.raw_path, files.raw_size, entry.samples
        start = header_size(n)
        try:
            if os.fstat(fd).st_size != size:
                return None
            count, first = _PAIR.unpack(os.pread(fd, 8, 0))
            if count != n or not start <= first <= size:
                return None
            config = (os.pread(fd, first - start, start), _layout(entry))
            if config not in self._configs_ok:
                check_config(memoryview(config[0]), entry, path)
                if len(self._configs_ok) < _CONFIGS_KEPT:
                    self._configs_ok.add(config)
        except (OSError, struct.error, FormatError):
            return None
        head = self._heads[s] = (path, size, n, first, self.decoder(s, entry).decode)
        return head

    def try_open(self, s: int) -> OpenShard | None:
        """Open shard ``s`` if its file is complete in the cache (pinning it under a limit)."""
        h = self.cached(s)
        if h is not None:
            return h
        if self.pinning:
            self.release_all()  # never hold a pin while we may wait for room
        files = self.catalog.shards[s].files
        pin: FileLock | None = None
        if self.pinning:
            pin = FileLock(files.pin_lock)
            pin.shared()
        try:
            st = os.stat(files.raw_path)
        except FileNotFoundError:
            st = None
        if st is None or st.st_size != files.raw_size:
            if pin is not None:
                pin.release()
            return None
        try:
            self._check_version(s)
            offsets = self._offsets.get(s)
            if offsets is None:
                try:
                    algo = self.catalog.shards[s].validate_hash or self.validate_hash
                    offsets = _check_cached(files.raw_path, self.catalog, s, algo)
                except _MetaMissing:
                    if pin is not None:
                        pin.release()
                    return None  # the caller fetches (the fetcher brings the meta file)
                except (FormatError, IntegrityError):
                    # A corrupt cached copy of remote data is deleted and fetched once more;
                    # local-only data (the only copy) and a second failure are raised.
                    if self.catalog.shards[s].remote is None or s in self._dropped:
                        raise
                    self._dropped.add(s)
                    os.unlink(files.raw_path)
                    meta = self.catalog.shards[s].meta
                    if meta is not None:  # which of the two is bad is not known: drop both
                        try:
                            os.unlink(meta.files.raw_path)
                        except FileNotFoundError:
                            pass
                    if pin is not None:
                        pin.release()
                    return None
                self._offsets[s] = offsets
            h = self._handle(s, files.raw_path, offsets)
        except BaseException:
            if pin is not None:
                pin.release()
            raise
        if pin is not None:
            h._pin = pin
            self.space.note_pin(pin.path, 1)
            try:
                os.utime(files.raw_path)  # recency for LRU eviction
            except FileNotFoundError:
                pass
        self.stats.shard_maps += 1
        if self._closed.pop(s, 0) is None and self.keep_open < self.max_open:
            self.keep_open += 1  # closed too early: the working set is larger than the LRU
        self._open[s] = h
        self._open_bytes += files.raw_size
        if not self.pinning:
            self._touch(s)
        elif self.map_limit is not None and isinstance(h, OpenShard):
            h.by_copy = files.raw_size > self.map_limit  # one shard open at a time
            self.stats.shard_copies += h.by_copy
        self._evict()
        return h

    def _handle(self, s: int, path: str, offsets: Sequence[int]) -> OpenShard:
        entry = self.catalog.entries[s]
        if entry.format == "parquet":  # a row group: decoded by pyarrow (parquet/io_rowgroup.py)
            from astream.parquet.io_rowgroup import open_row_group

            shard = self.catalog.shards[s]
            return open_row_group(path, shard, entry, self.space, self.pinning)  # type: ignore[arg-type,return-value]
        h = OpenShard(path, offsets, self.decoder(s))
        h._drop = self.big(s) > 0
        return h

    def hold_pin(self, s: int) -> FileLock | None:
        """Pin ``s`` across its fetch (under a limit). Without it, a shard downloaded for us can
        be evicted by a process waiting for room before we open it, again and again, when the
        limit holds few shards. A pin on an absent shard blocks no one: evictors only look at
        present shards, and a present pinned shard is being read, never waiting."""
        if not self.pinning:
            return None
        self.release_all()  # at most one pin: the one we are about to take
        lk = FileLock(self.catalog.shards[s].files.pin_lock)
        lk.shared()
        self.space.note_pin(lk.path, 1)
        return lk

    def drop_pin(self, lk: FileLock | None) -> None:
        if lk is not None:
            self.space.note_pin(lk.path, -1)
            lk.release()

    def open(self, s: int, fetch: Callable[[int], object]) -> OpenShard:
        """Open shard ``s``, calling ``fetch(s)`` (which blocks until the file is there) on a
        miss. Loops because a shard fetched for us may be evicted before we pin it."""
        h = self.try_open(s)
        if h is not None:
            self.stats.cache_hits += 1
            return h
        self.stats.cache_misses += 1
        for _ in range(8):
            hold = self.hold_pin(s)
            try:
                fetch(s)
                h = self.try_open(s)
            finally:
                self.drop_pin(hold)
            if h is not None:
                return h
        raise FormatError(
            "shard keeps disappearing from the cache right after download (cache_limit too "
            "small for the processes sharing it?)",
            self.catalog.shards[s].files.raw_path,
        )


def decode_batch(
    groups: Groups, size: int, open_shard: Callable[[int], OpenShard]
) -> list[dict[str, Any]]:
    """Decode one batch (grouped by :func:`batch_groups`), in order, opening each shard once."""
    if len(groups) == 1:
        return open_shard(groups[0][0]).samples(groups[0][2])
    out: list[Any] = [None] * size
    for s, positions, locals_ in groups:
        for j, x in zip(positions, open_shard(s).samples(locals_)):
            out[j] = x
    return out
