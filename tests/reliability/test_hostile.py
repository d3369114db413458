"""Issue 7.4: hostile input. Index and shard parsers fed arbitrary bytes raise FormatError and
nothing else; counts and sizes cannot make us allocate; basenames cannot reach outside the cache;
pkl is refused; an HTTP server that ignores Range or answers another range is detected."""

from __future__ import annotations

import json
import os
import tracemalloc
from typing import Any

import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from astream import MDSWriter, StreamingDataset
from astream.core.compression import decompress
from astream.core.index import parse_index
from astream.core.shard import SampleDecoder, ShardView, parse_offsets
from astream.errors import FormatError, StorageError, UnsafeEncodingError
from astream.testing import StaticHttpServer
from astream.testing.servers import ThreadedApp

from .conftest import payload, shard_names, write_ds

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, dict[str, Any], bytes]:
    """(index.json bytes, its parsed JSON, the first shard's bytes) of a small dataset."""
    src = write_ds(str(tmp_path_factory.mktemp("tiny") / "ds"), 40, size_limit=4000)
    with open(os.path.join(src, "index.json"), "rb") as f:
        raw = f.read()
    with open(os.path.join(src, shard_names(src)[0]), "rb") as f:
        shard = f.read()
    return raw, json.loads(raw), shard


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=8),
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=6), kids, max_size=4)
    ),
    max_leaves=12,
)


@FUZZ
@given(data=st.binary(max_size=400))
def test_parse_index_random_bytes_only_format_error(data: bytes) -> None:
    try:
        parse_index(data, "fuzz.json")
    except FormatError:
        pass


@FUZZ
@given(st.data())
def test_parse_index_mutated_fields_only_format_error(tiny: Any, data: st.DataObject) -> None:
    _, obj, _ = tiny
    obj = json.loads(json.dumps(obj))
    shard = data.draw(st.sampled_from(obj["shards"]))
    for _ in range(data.draw(st.integers(1, 3))):
        dicts = [d for d in (shard, shard.get("raw_data"), obj) if isinstance(d, dict)]
        target = data.draw(st.sampled_from(dicts))
        key = data.draw(st.sampled_from([*sorted(target), "extra"]))
        target[key] = data.draw(JSON)
    try:
        index = parse_index(json.dumps(obj).encode(), "fuzz.json")
    except FormatError:
        return
    for e in index.shards:  # whatever parses is sane enough to build readers from
        assert e.raw_data.bytes < 2**32 and 8 + 4 * e.samples <= e.raw_data.bytes


@FUZZ
@given(st.data())
def test_shard_mutations_only_format_error(tiny: Any, data: st.DataObject) -> None:
    _, _, shard = tiny
    entry = parse_index(tiny[0], "i").shards[0]
    buf = bytearray(shard)
    for _ in range(data.draw(st.integers(1, 6))):
        i = data.draw(st.integers(0, len(buf) - 1))
        buf[i] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        buf = buf[: data.draw(st.integers(0, len(buf)))]
    try:
        view = ShardView(bytes(buf), entry, "fuzz.mds")
        dec = SampleDecoder(entry, False, "fuzz.mds")
        for k in range(len(view)):
            dec.decode(view.sample_bytes(k))
    except FormatError:
        pass


@FUZZ
@given(data=st.binary(max_size=200), n=st.none() | st.integers(0, 2**32 - 1))
def test_parse_offsets_random_bytes_only_format_error(data: bytes, n: int | None) -> None:
    try:
        parse_offsets(data, "fuzz.mds", n, len(data))
    except FormatError:
        pass


def test_huge_sample_count_does_not_allocate(tiny: Any) -> None:
    _, obj, shard = tiny
    hostile = b"\xff\xff\xff\xff" + shard[4:]
    tracemalloc.start()
    try:
        with pytest.raises(FormatError, match=r"4294967295 samples need 17179869188 header bytes"):
            parse_offsets(hostile, "h.mds")
        obj = json.loads(json.dumps(obj))
        obj["shards"][0]["samples"] = 2**32 - 1
        with pytest.raises(FormatError, match=r"shards\[0\]\.samples: 4294967295 samples need"):
            parse_index(json.dumps(obj).encode(), "h.json")
        obj["shards"][0]["samples"] = 3
        obj["shards"][0]["raw_data"]["bytes"] = 2**40
        with pytest.raises(FormatError, match=r"shards\[0\]\.raw_data\.bytes: 1099511627776 "):
            parse_index(json.dumps(obj).encode(), "h.json")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 << 20, peak


def test_decompression_bomb_is_bounded() -> None:
    import zstandard

    bomb = zstandard.ZstdCompressor().compress(bytes(64 << 20))
    tracemalloc.start()
    try:
        with pytest.raises(
            FormatError, match=r"zstd: decompressed to more than 1001 bytes, expected 1000"
        ):
            decompress("zstd", bomb, 1000, "bomb.zstd")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, peak


def _hostile_index(src: str, basename: str) -> None:
    path = os.path.join(src, "index.json")
    with open(path) as f:
        obj = json.load(f)
    obj["shards"][0]["raw_data"]["basename"] = basename
    with open(path, "w") as f:
        json.dump(obj, f)


@pytest.mark.parametrize(
    ("basename", "why"),
    [
        ("../escape.mds", "escapes"),
        ("a/../../escape.mds", "escapes"),
        ("/tmp/escape.mds", "absolute path"),
        ("C:/escape.mds", "absolute path"),
        ("a\\..\\escape.mds", "backslash"),
        ("ok\x00.mds", "NUL byte"),
    ],
)
def test_basename_escaping_the_cache_is_rejected(
    s3_bucket: str, tmp_path: Any, basename: str, why: str
) -> None:
    from astream.storage.sync import upload

    src = write_ds(str(tmp_path / "src"), 50, size_limit=4000)
    _hostile_index(src, basename)
    url = f"{s3_bucket}/hostile-{os.urandom(4).hex()}"
    upload(src, url)
    cache = tmp_path / "deep" / "cache"
    with pytest.raises(FormatError, match=rf"shards\[0\]\.raw_data\.basename: .*{why}"):
        StreamingDataset(remote=url, local=str(cache), batch_size=4)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]  # nothing written at all
    assert not os.path.exists("/tmp/escape.mds")


def test_symlink_in_cache_cannot_redirect_writes(s3_bucket: str, tmp_path: Any) -> None:
    from astream.storage.sync import upload

    src = write_ds(str(tmp_path / "src"), 50, size_limit=4000)
    first = shard_names(src)[0]
    os.makedirs(os.path.join(src, "sub"))
    os.rename(os.path.join(src, first), os.path.join(src, "sub", first))
    _hostile_index(src, f"sub/{first}")
    url = f"{s3_bucket}/symlink-{os.urandom(4).hex()}"
    upload(src, url)
    outside = tmp_path / "outside"
    outside.mkdir()
    cache = tmp_path / "cache"
    cache.mkdir()
    os.symlink(outside, cache / "sub")  # planted: the cache's "sub" points elsewhere
    ds = StreamingDataset(remote=url, local=str(cache), batch_size=2)
    with pytest.raises(FormatError, match=r"sub/shard\.00000\.mds: shard path leaves the cache"):
        list(ds)
    assert list(outside.iterdir()) == []


def test_pkl_refused_by_default(tmp_path: Any) -> None:
    src = str(tmp_path / "pkl")
    with MDSWriter(out=src, columns={"obj": "pkl", "id": "int"}) as w:
        for i in range(10):
            w.write({"obj": {"i": i}, "id": i})
    unsafe = r"column 'obj' contains an unsafe type: encoding 'pkl'"
    with pytest.raises(UnsafeEncodingError, match=unsafe):
        list(StreamingDataset(local=src, batch_size=2))
    got = list(StreamingDataset(local=src, batch_size=2, allow_unsafe_types=True))
    assert sorted(s["obj"]["i"] for s in got) == list(range(10))


def test_http_server_ignoring_range_is_detected(tmp_path: Any) -> None:
    root = tmp_path / "www"
    write_ds(str(root / "ds"), 200, size_limit=8000)
    with StaticHttpServer(str(root), honor_range=False) as srv:
        ds = StreamingDataset(remote=f"{srv.url}/ds", local=str(tmp_path / "c"), batch_size=4)
        with pytest.raises(StorageError, match=r"server ignored the Range header \(bytes=0-"):
            ds[150]  # random access: a header range read


class _ShiftedRanges:
    """Answers every ranged GET with the range one byte later, and says so in Content-Range."""

    def __init__(self, root: str) -> None:
        app = web.Application()
        app.router.add_get("/{path:.*}", self.get)
        self.root = root
        self.app = ThreadedApp(app)

    async def get(self, request: web.Request) -> web.Response:
        with open(os.path.join(self.root, request.match_info["path"]), "rb") as f:
            data = f.read()
        rng = request.headers.get("Range")
        if rng is None:
            return web.Response(body=data)
        a, _, b = rng.removeprefix("bytes=").partition("-")
        start = int(a) + 1
        end = min(len(data) - 1, int(b) + 1 if b else len(data) - 1)
        headers = {"Content-Range": f"bytes {start}-{end}/{len(data)}"}
        return web.Response(status=206, body=data[start : end + 1], headers=headers)


def test_http_wrong_content_range_is_detected(tmp_path: Any) -> None:
    root = tmp_path / "www"
    write_ds(str(root / "ds"), 200, size_limit=8000)
    srv = _ShiftedRanges(str(root))
    srv.app.start()
    try:
        ds = StreamingDataset(
            remote=f"{srv.app.url}/ds", local=str(tmp_path / "c"), batch_size=4, download_retry=0
        )
        with pytest.raises(StorageError, match=r"Content-Range bytes 1-\d+/\d+ .* asked bytes=0-"):
            ds[150]
        with pytest.raises(StorageError, match=r"Content-Range bytes 1-"):
            list(ds)
    finally:
        srv.app.stop()
    assert payload(0)  # the dataset itself is fine; only the server lies
