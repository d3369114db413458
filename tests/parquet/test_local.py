"""Parquet streams over local files: in place, and through the fetch path (a local "remote"):
exact samples, projection, random access, shuffle, cache_limit, HF splits, index caching,
corrupt footers and files changed under a cached index."""

from __future__ import annotations

import os
import shutil
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from astream import Stream, StreamingDataset
from astream.errors import ConfigError, FormatError
from astream.parquet.io_index import CACHE_NAME
from astream.parquet.published import INDEX_NAME
from astream.parquet.table import select_keys

from .conftest import LAYOUT, same, write_table


def pq_ds(remote: str | None, local: str | None, **kw: Any) -> StreamingDataset:
    stream = {k: kw.pop(k) for k in ("columns", "files", "split") if k in kw}
    return StreamingDataset(
        streams=[Stream(remote=remote, local=local, format="parquet", **stream)],
        batch_size=kw.pop("batch_size", 4),
        **kw,
    )


def test_in_place_exact_rows_in_order_and_random_access(pq_table: Any) -> None:
    root, rows = pq_table
    ds = pq_ds(None, root)
    assert len(ds) == 170
    assert ds.num_shards == sum(-(-n // rg) for n, rg in LAYOUT) == 12
    got = list(ds)
    assert len(got) == len(rows)
    bad = [i for i, (g, w) in enumerate(zip(got, rows)) if not same(g, w)]
    assert bad == []
    for i in (0, 6, 7, 29, 30, 79, 80, 169, -1):
        assert same(ds[i], rows[i])
    # nested lists come back as Python lists, binary as bytes, dictionary strings as str
    assert ds[1]["nest"] == [[1], [2, 3]] and isinstance(ds[1]["img"], bytes)
    assert ds[3]["img"] is None and ds[2]["tok"] is None and ds[0]["txt"] is None
    assert ds[4]["txt"] == "dog" and ds[4]["tok"].dtype == np.int32


def test_projection_through_the_fetch_path(pq_table: Any, fresh: Any) -> None:
    root, rows = pq_table
    ds = pq_ds(root, fresh(), columns=["tok", "label"])
    got = list(ds)
    want = [{"tok": r["tok"], "label": r["label"]} for r in rows]
    assert all(same(g, w) for g, w in zip(got, want)) and len(got) == 170
    assert list(got[0]) == ["tok", "label"]
    # the cache holds only the projected chunks: far less than the files
    files = sum(os.path.getsize(os.path.join(root, f)) for f in os.listdir(root)
                if f.endswith(".parquet"))  # fmt: skip
    assert 0 < ds.cache_usage < files // 2
    assert same(ds[123], want[123])


def test_shuffled_epochs_are_exact_and_deterministic(pq_table: Any, fresh: Any) -> None:
    root, _ = pq_table
    a = [x["label"] for x in pq_ds(root, fresh("a"), shuffle=True, columns=["label"])]
    b = [x["label"] for x in pq_ds(None, root, shuffle=True, columns=["label"])]
    c = [x["label"] for x in pq_ds(None, root, shuffle=True, shuffle_seed=1, columns=["label"])]
    assert sorted(a) == list(range(170)) and a == b and c != a and sorted(c) == sorted(a)


def test_cache_limit_bounds_the_chunk_cache(pq_table: Any, fresh: Any) -> None:
    root, _ = pq_table
    probe = pq_ds(root, fresh("probe"))
    biggest = probe.catalog.max_footprint
    with pytest.warns(UserWarning, match="holds fewer shards than one shuffle block"):
        ds = pq_ds(root, fresh("tight"), cache_limit=3 * biggest, shuffle=True, batch_size=2)
    seen = []
    for x in ds:
        seen.append(x["label"])
        assert ds.cache_usage <= 3 * biggest
    assert sorted(seen) == list(range(170))
    assert ds.stats.shards_fetched > 0


def test_transform_applies(pq_table: Any) -> None:
    root, _ = pq_table
    ds = pq_ds(None, root, columns=["label"], transform=lambda s: s["label"] * 2)
    assert list(ds)[:3] == [0, 2, 4] and ds[10] == 20


def test_hugging_face_split_layout(tmp_path: Any, fresh: Any) -> None:
    root = str(tmp_path / "hf")
    train = write_table(os.path.join(root, "data"), [(20, 8), (15, 8)], prefix="train")
    test = write_table(os.path.join(root, "data"), [(9, 4)], prefix="test", start=1000)
    with open(os.path.join(root, "README.md"), "w") as f:
        f.write("---\nconfigs: []\n---\n")
    tr = pq_ds(root, fresh("tr"), split="train", columns=["label"])
    te = pq_ds(None, root, split="test", columns=["label"])
    assert [x["label"] for x in tr] == [r["label"] for r in train]
    assert [x["label"] for x in te] == [r["label"] for r in test]
    assert select_keys(["data/train/0.parquet", "train-0.parquet", "x/trainer-0.parquet",
                        "data/test-0.parquet", "data/train-1.parquet.crc"], "train") == [
        "data/train/0.parquet", "train-0.parquet"]  # fmt: skip


def test_explicit_file_list(pq_table: Any, fresh: Any) -> None:
    root, _ = pq_table
    ds = pq_ds(root, fresh(), files=["part-2.parquet", "part-0.parquet"], columns=["label"])
    assert [x["label"] for x in ds] == list(range(80, 160)) + list(range(30))


def test_bad_arguments_are_config_errors(pq_table: Any) -> None:
    root, _ = pq_table
    with pytest.raises(ConfigError, match="columns: 'nope' is not a column"):
        pq_ds(None, root, columns=["label", "nope"])
    with pytest.raises(ConfigError, match="columns is for format='parquet'"):
        Stream(local=root, columns=["label"])
    with pytest.raises(ConfigError, match="format must be one of"):
        Stream(local=root, format="orc")
    with pytest.raises(ConfigError, match=r"files: '\.\./x\.parquet'"):
        Stream(local=root, format="parquet", files=["../x.parquet"])


def _copy(src: str, dst: str) -> str:
    shutil.copytree(src, dst)
    for f in os.listdir(dst):
        if not f.endswith(".parquet"):
            shutil.rmtree(os.path.join(dst, f), ignore_errors=True)
    return dst


def test_truncated_and_corrupt_footers_name_the_file(pq_table: Any, tmp_path: Any) -> None:
    root, _ = pq_table
    a = _copy(root, str(tmp_path / "trunc"))
    p = os.path.join(a, "part-1.parquet")
    with open(p, "r+b") as f:
        f.truncate(os.path.getsize(p) - 100)
    with pytest.raises(FormatError, match=r"part-1\.parquet: no Parquet footer"):
        pq_ds(None, a)
    b = _copy(root, str(tmp_path / "corrupt"))
    p = os.path.join(b, "part-2.parquet")
    size = os.path.getsize(p)
    with open(p, "r+b") as f:  # garble the footer's Thrift, keep its length and magic
        f.seek(size - 8 - 200)
        f.write(b"\xff" * 150)
    with pytest.raises(FormatError, match=r"part-2\.parquet: corrupt Parquet footer"):
        pq_ds(None, b)
    c = _copy(root, str(tmp_path / "len"))
    p = os.path.join(c, "part-0.parquet")
    with open(p, "r+b") as f:  # a footer length larger than the file
        f.seek(os.path.getsize(p) - 8)
        f.write((1 << 30).to_bytes(4, "little"))
    with pytest.raises(FormatError, match=r"part-0\.parquet: footer length 1073741824"):
        pq_ds(None, c)


def test_warm_start_reads_no_footer_and_changed_file_is_refused(
    pq_table: Any, tmp_path: Any, fresh: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from astream.parquet import io_footers

    root = _copy(pq_table[0], str(tmp_path / "t"))
    reads: list[str] = []
    real = io_footers.read_footer

    async def counting(store: Any, info: Any) -> Any:
        reads.append(info.key)
        return await real(store, info)

    monkeypatch.setattr(io_footers, "read_footer", counting)
    local = fresh()
    pq_ds(root, local)
    assert sorted(reads) == [f"part-{k}.parquet" for k in range(4)]
    assert os.path.exists(os.path.join(local, ".astream", CACHE_NAME))
    reads.clear()
    ds = pq_ds(root, local)
    assert reads == [] and len(ds) == 170
    # a new file is indexed (only its footer is read); the others still come from the cache
    write_table(root, [(5, 5)], prefix="zz", start=500)
    assert len(pq_ds(root, local)) == 175 and reads == ["zz-0.parquet"]
    reads.clear()  # ... and the cached index now holds it: the next start reads no footer
    assert len(pq_ds(root, local)) == 175 and reads == []
    # a file rewritten in place under the cached index: refused, naming it
    pq.write_table(pq.read_table(os.path.join(root, "part-1.parquet")).slice(0, 10),
                   os.path.join(root, "part-1.parquet"))  # fmt: skip
    with pytest.raises(FormatError, match=r"part-1\.parquet: changed since its Parquet index"):
        pq_ds(root, local)


def test_published_index_serves_a_fresh_cache(
    pq_table: Any, tmp_path: Any, fresh: Any, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    from astream.__main__ import main  # noqa: F401  (the CLI entry point)
    from astream.cli import main as cli
    from astream.parquet import io_footers

    root = _copy(pq_table[0], str(tmp_path / "t"))
    assert cli(["index", root]) == 0
    assert "wrote" in capsys.readouterr().out
    assert os.path.exists(os.path.join(root, INDEX_NAME))
    reads: list[str] = []

    async def no_footers(store: Any, info: Any) -> Any:
        reads.append(info.key)
        raise AssertionError("a footer was read")

    monkeypatch.setattr(io_footers, "read_footer", no_footers)
    ds = pq_ds(root, fresh(), columns=["label"])
    assert reads == [] and [x["label"] for x in ds] == list(range(170))
    # a file changed after `astream index`: refused, naming it
    os.utime(os.path.join(root, "part-3.parquet"), ns=(1, 1))
    with pytest.raises(FormatError, match=r"part-3\.parquet: changed since"):
        pq_ds(root, fresh("other"))


def test_direct_dataset_arguments(pq_table: Any, fresh: Any) -> None:
    """format/columns/files on StreamingDataset itself build the single Parquet stream."""
    root, rows = pq_table
    ds = StreamingDataset(remote=root, local=fresh(), format="parquet", columns=["label", "txt"],
                          batch_size=4)  # fmt: skip
    got = list(ds)
    assert [list(s) for s in got[:1]] == [["label", "txt"]]
    assert [s["label"] for s in got] == list(range(170))
    assert [s["txt"] for s in got] == [r["txt"] for r in rows]
    assert ds.streams[0].format == "parquet" and ds.streams[0].columns == ["label", "txt"]
    only = StreamingDataset(local=root, format="parquet", files=["part-3.parquet"],
                            columns=["label"], batch_size=1)  # fmt: skip
    assert [s["label"] for s in only] == list(range(160, 170))
    with pytest.raises(ConfigError, match=r"format must be one of \('mds', 'parquet'\), got 'orc'"):
        StreamingDataset(local=root, format="orc", batch_size=1)
    with pytest.raises(ConfigError, match="columns is for format='parquet'"):
        StreamingDataset(local=root, columns=["label"], batch_size=1)
    with pytest.raises(ConfigError, match=r"format: these build the single stream"):
        StreamingDataset(streams=[Stream(local=root, format="parquet")], format="parquet",
                         batch_size=1)  # fmt: skip
    with pytest.raises(ConfigError, match=r"stream_config sets \['format'\]"):
        StreamingDataset(local=root, format="parquet", stream_config={"format": "parquet"},
                         batch_size=1)  # fmt: skip


def test_shuffled_epoch_decodes_each_row_group_once(
    tmp_path: Any, fresh: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shuffle moves between many row groups (40 here, more than the reader keeps open):
    each is decoded once per process, not once per visit."""
    from astream.parquet import io_rowgroup

    root = str(tmp_path / "many")
    write_table(root, [(200, 5)])  # 40 row groups in one file
    decoded: list[str] = []
    real = io_rowgroup.decode_row_group

    def counting(path: str, shard: Any, entry: Any) -> Any:
        decoded.append(entry.raw_data.basename)
        return real(path, shard, entry)

    monkeypatch.setattr(io_rowgroup, "decode_row_group", counting)
    monkeypatch.setattr(io_rowgroup, "_decoded", io_rowgroup.OrderedDict())
    monkeypatch.setattr(io_rowgroup, "_decoded_bytes", 0)
    ds = pq_ds(root, fresh(), shuffle=True, shuffle_block_size=200, columns=["label"])
    assert sorted(x["label"] for x in ds) == list(range(200))
    assert len(decoded) == 40 and len(set(decoded)) == 40


def test_footer_longer_than_the_tail_read_takes_a_second_get(
    pq_table: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The footer is read from the object's last ``TAIL`` bytes; one longer than that needs a
    second ranged GET for its head. Every split gives the same index as the usual one-GET read,
    with the GET count the split implies; and an encrypted footer (``PARE``) is refused."""
    import asyncio

    from astream.parquet import io_footers
    from astream.storage.registry import open_store

    root = _copy(pq_table[0], str(tmp_path / "t"))
    store = open_store(root)
    ranges: list[tuple[int, int]] = []
    real = store.get_range

    async def counting(key: str, start: int, end: int, **kw: Any) -> bytes:
        ranges.append((start, end))
        return await real(key, start, end, **kw)

    monkeypatch.setattr(store, "get_range", counting)
    key = "part-0.parquet"
    info = asyncio.run(store.head(key))
    with open(os.path.join(root, key), "rb") as f:
        f.seek(info.size - 8)
        n = int.from_bytes(f.read(4), "little")  # the footer's Thrift length
    assert 200 < n < io_footers.TAIL - 8
    usual = asyncio.run(io_footers.read_footer(store, info))
    assert ranges == [(max(0, info.size - io_footers.TAIL), info.size)]
    for tail, gets in ((n + 8, 1), (n + 7, 2), (n // 2, 2), (12, 2)):
        ranges.clear()
        monkeypatch.setattr(io_footers, "TAIL", tail)
        got = asyncio.run(io_footers.read_footer(store, info))
        assert got == usual and got.footer == usual.footer, tail
        assert len(ranges) == gets, (tail, ranges)
        assert ranges[0] == (info.size - tail, info.size)
        if gets == 2:  # the head: from the footer's first byte to where the tail read began
            assert ranges[1] == (info.size - 8 - n, info.size - tail)
    monkeypatch.setattr(io_footers, "TAIL", 64 << 10)
    with open(os.path.join(root, key), "r+b") as f:  # the encrypted-footer magic
        f.seek(info.size - 4)
        f.write(b"PARE")
    info = asyncio.run(store.head(key))
    with pytest.raises(FormatError, match=r"part-0\.parquet: encrypted Parquet footers"):
        asyncio.run(io_footers.read_footer(store, info))
