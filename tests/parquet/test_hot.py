"""The decoded row group shared by a node's processes (parquet/io_rowgroup.py): decoded once
per node with 2 real DataLoader workers, mapped by every later reader, counted under
``cache_limit`` and evicted with its row group, never trusted when incomplete."""

from __future__ import annotations

import os
from collections import OrderedDict
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from astream import Stream, StreamingDataLoader, StreamingDataset
from astream.parquet import io_rowgroup
from astream.runtime.cache import TMP_MARK

from .conftest import same

GROUPS, ROWS = 6, 30  # row groups of ~270 KB: above SHARE_MIN_BYTES


def big_rows(n: int, seed: int = 7) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    return [
        {
            "label": i,
            "img": rng.integers(
                0, 256, size=int(rng.integers(6000, 12000)), dtype=np.uint8
            ).tobytes(),
            "tok": rng.integers(0, 60000, size=int(rng.integers(0, 300)), dtype=np.uint16),
            "txt": f"row {i} é",
        }
        for i in range(n)
    ]


def write_big(root: str, rows: list[dict[str, Any]]) -> None:
    os.makedirs(root, exist_ok=True)
    t = pa.table(
        {
            "label": pa.array([r["label"] for r in rows], pa.int64()),
            "img": pa.array([r["img"] for r in rows], pa.binary()),
            "tok": pa.array([r["tok"].tolist() for r in rows], pa.list_(pa.uint16())),
            "txt": pa.array([r["txt"] for r in rows], pa.string()),
        }
    )
    pq.write_table(t, os.path.join(root, "big.parquet"), row_group_size=ROWS)


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[dict[str, Any]]]:
    root = str(tmp_path_factory.mktemp("pqbig") / "table")
    rows = big_rows(GROUPS * ROWS)
    write_big(root, rows)
    return root, rows


def ds_of(root: str, cache: str, **kw: Any) -> StreamingDataset:
    return StreamingDataset(
        streams=[Stream(remote=root, local=cache, format="parquet")],
        batch_size=kw.pop("batch_size", 4),
        shuffle=kw.pop("shuffle", True),
        **kw,
    )


def sides(cache: str) -> list[str]:
    return sorted(f for f in os.listdir(cache) if f.endswith(io_rowgroup.SIDE_SUFFIX))


def _listed(batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return batch


@pytest.fixture
def decodes(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Every pyarrow decode of this test, in any process (forked workers inherit the patch),
    appended to a file: the list of decoded row groups' names."""
    log = str(tmp_path / "decodes.log")
    real = io_rowgroup.decode_row_group

    def counting(path: str, shard: Any, entry: Any) -> Any:
        with open(log, "a") as f:
            f.write(entry.raw_data.basename + "\n")
        return real(path, shard, entry)

    monkeypatch.setattr(io_rowgroup, "decode_row_group", counting)
    monkeypatch.setattr(io_rowgroup, "_decoded", OrderedDict())
    monkeypatch.setattr(io_rowgroup, "_decoded_bytes", 0)

    def read() -> list[str]:
        if not os.path.exists(log):
            return []
        with open(log) as f:
            return f.read().split()

    return read


def test_row_group_decoded_once_per_node_by_two_workers(big: Any, fresh: Any, decodes: Any) -> None:
    root, rows = big
    cache = fresh()
    ds = ds_of(root, cache)
    ld = StreamingDataLoader(ds, batch_size=4, num_workers=2, collate_fn=_listed)
    got = [s for b in ld for s in b]
    assert sorted(s["label"] for s in got) == list(range(len(rows)))
    assert all(same(s, rows[s["label"]]) for s in got)
    assert isinstance(got[0]["img"], bytes) and got[0]["tok"].dtype == np.uint16
    # both workers read every row group (a shuffle spreads them); each was decoded once
    assert len(decodes()) == GROUPS and len(set(decodes())) == GROUPS
    assert len(sides(cache)) == GROUPS
    # a later epoch (fresh dataset, fresh workers) maps the decoded files: no decode at all
    ld2 = StreamingDataLoader(ds_of(root, cache), batch_size=4, num_workers=2, collate_fn=_listed)
    again = [s for b in ld2 for s in b]
    assert sorted(s["label"] for s in again) == list(range(len(rows)))
    assert all(same(s, rows[s["label"]]) for s in again)
    assert len(decodes()) == GROUPS
    # random access maps it too
    assert same(ds_of(root, cache)[77], rows[77]) and len(decodes()) == GROUPS


def test_in_place_table_keeps_a_private_decode(big: Any, decodes: Any) -> None:
    root, rows = big
    ds = StreamingDataset(streams=[Stream(local=root, format="parquet")], batch_size=4)
    assert all(same(g, w) for g, w in zip(ds, rows))
    assert sides(root) == [] and len(decodes()) == GROUPS


@pytest.mark.filterwarnings("ignore:cache_limit=")
def test_decoded_files_count_under_cache_limit_and_go_with_their_row_group(
    big: Any, fresh: Any
) -> None:
    root, rows = big
    full = fresh("full")
    list(ds_of(root, full, shuffle=False))
    names = [f for f in os.listdir(full) if f.startswith("big.parquet.rg")]
    raw = {f: os.path.getsize(os.path.join(full, f)) for f in names
           if not f.endswith(io_rowgroup.SIDE_SUFFIX)}  # fmt: skip
    side = {f: os.path.getsize(os.path.join(full, f)) for f in sides(full)}
    assert len(raw) == len(side) == GROUPS
    # what the cache counts: the raw chunks and the decoded files
    ds_full = ds_of(root, full)
    assert ds_full.cache_usage == sum(raw.values()) + sum(side.values())
    # evicting a row group deletes its decoded file with it
    freed = ds_full.evict_shard(0)
    first = sorted(raw)[0]
    assert freed == raw[first] + side[first + io_rowgroup.SIDE_SUFFIX]
    assert not os.path.exists(os.path.join(full, first + io_rowgroup.SIDE_SUFFIX))
    # a limit of two row groups and one decoded file: usage never exceeds it (a decoded file
    # is written only into free room), samples stay exact, decoded files were written and
    # evicted along the way
    limit = 2 * max(raw.values()) + max(side.values()) + 1000
    cache = fresh("tight")
    ds = ds_of(root, cache, cache_limit=limit, batch_size=2, shuffle_block_size=60)
    seen_sides = 0
    got = []
    for s in ds:
        got.append(s)
        assert ds.cache_usage <= limit
        seen_sides = max(seen_sides, len(sides(cache)))
    assert sorted(s["label"] for s in got) == list(range(len(rows)))
    assert all(same(s, rows[s["label"]]) for s in got)
    # every row group downloaded and gone by the end was evicted, and nothing else was: the
    # count follows the downloads and what the cache holds at the end, which depends on
    # whether a decoded file found room (on a busy machine three raw groups can be left)
    fetched = int(ds.stats.snapshot()["shards_fetched"])
    left = [f for f in os.listdir(cache)
            if f.startswith("big.parquet.rg") and not f.endswith(io_rowgroup.SIDE_SUFFIX)
            and TMP_MARK not in f]  # fmt: skip
    assert fetched >= GROUPS - 1 and len(left) <= 3  # three fit when no decoded file is kept
    assert seen_sides >= 1 and ds.engine.space.evictions == fetched - len(left) >= 1
    # and with 2 workers reading at once
    tight2 = ds_of(root, fresh("tight2"), cache_limit=limit, batch_size=2, shuffle_block_size=60)
    ld = StreamingDataLoader(tight2, batch_size=2, num_workers=2, collate_fn=_listed)
    got = [s for b in ld for s in b]
    assert sorted(s["label"] for s in got) == list(range(len(rows)))
    assert ld.dataset.cache_usage <= limit  # type: ignore[attr-defined]


def test_incomplete_decoded_files_are_never_trusted(big: Any, fresh: Any, decodes: Any) -> None:
    root, rows = big
    cache = fresh()
    list(ds_of(root, cache, shuffle=False))
    assert len(decodes()) == GROUPS
    names = sides(cache)
    # a truncated decoded file (say, a disk that lost its tail) and a garbage one
    bad = os.path.join(cache, names[0])
    with open(bad, "r+b") as f:
        f.truncate(os.path.getsize(bad) // 2)
    with open(os.path.join(cache, names[1]), "wb") as f:
        f.write(b"\0" * 4096)
    io_rowgroup._decoded.clear()
    got = list(ds_of(root, cache, shuffle=False))
    assert all(same(g, w) for g, w in zip(got, rows)) and len(got) == len(rows)
    assert sorted(decodes()[GROUPS:]) == sorted(n[: -len(io_rowgroup.SIDE_SUFFIX)]
                                                for n in names[:2])  # fmt: skip
    for n in names[:2]:  # rewritten, complete
        assert pa.ipc.open_file(pa.memory_map(os.path.join(cache, n))).read_all().num_rows == ROWS
    # a temporary decoded file left by a dead writer is removed by a reservation needing room
    stale = os.path.join(cache, names[2] + TMP_MARK + "999-dead")
    with open(stale, "wb") as f:
        f.truncate(10 << 20)
    used = sum(e.stat().st_size for e in os.scandir(cache) if e.is_file())
    side3 = os.path.getsize(os.path.join(cache, names[3]))
    # room for everything but shard 3's decoded file: re-fetching shard 3 needs room
    ds = ds_of(root, cache, cache_limit=used - side3 - 1, shuffle=False)
    assert ds.evict_shard(3) > 0
    assert ds.prepare_shard(3)  # needs room: the stale file's lock is free, so it goes
    assert not os.path.exists(stale)
    assert ds.cache_usage <= used - side3 - 1
