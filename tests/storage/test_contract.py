"""The ObjectStore contract, run against every backend on a real server."""

from __future__ import annotations

import asyncio
import os
import random

import pytest

from astream.errors import ObjectNotFoundError, StorageError
from astream.storage import ObjectInfo

from .conftest import Target

DATA = bytes(random.Random(7).getrandbits(8) for _ in range(100_000))


async def seeded(target: Target, objects: dict[str, bytes]) -> None:
    w = target.writer()
    try:
        for k, v in objects.items():
            await w.put(k, v)
    finally:
        await w.aclose()


async def test_ranges(target: Target) -> None:
    await seeded(target, {"obj.bin": DATA, "empty.bin": b""})
    store = target.open()
    try:
        assert await store.get_range("obj.bin") == DATA
        assert await store.get_range("obj.bin", 0, 10) == DATA[:10]  # prefix
        assert await store.get_range("obj.bin", 99_990) == DATA[99_990:]  # suffix
        assert await store.get_range("obj.bin", 500, 70_123) == DATA[500:70_123]
        assert await store.get_range("obj.bin", 42, 42) == b""  # empty range
        assert await store.get_range("obj.bin", 99_999, 200_000) == DATA[-1:]  # end clipped
        assert await store.get_range("obj.bin", 100_000) == b""  # starts at the end
        assert await store.get_range("obj.bin", 150_000, 160_000) == b""  # past the end
        assert await store.get_range("empty.bin") == b""
        info = await store.head("obj.bin")
        assert (info.key, info.size) == ("obj.bin", len(DATA))
        assert (await store.head("empty.bin")).size == 0
    finally:
        await store.aclose()


async def test_get_to_file(target: Target, tmp_path: object) -> None:
    await seeded(target, {"dir/obj.bin": DATA})
    store = target.open()
    path = os.path.join(str(tmp_path), "out.bin")
    try:
        assert await store.get_to_file("dir/obj.bin", path) == len(DATA)
        with open(path, "rb") as f:
            assert f.read() == DATA
    finally:
        await store.aclose()


async def test_missing_object(target: Target) -> None:
    store = target.open()
    try:
        for call in (store.get_range("nope.bin"), store.head("nope.bin")):
            with pytest.raises(ObjectNotFoundError) as ei:
                await call
            assert ei.value.url == store.url_for("nope.bin")
            assert ei.value.retryable is False
            assert "nope.bin" in str(ei.value)
        with pytest.raises(ObjectNotFoundError):
            await store.get_to_file("nope.bin", os.devnull)
    finally:
        await store.aclose()


async def test_list_with_pagination(target: Target) -> None:
    keys = [f"a/{i:02d}.bin" for i in range(5)] + ["b/x.bin", "ab.bin"]
    await seeded(target, {k: k.encode() * (i + 1) for i, k in enumerate(keys)})
    store = target.open()
    try:
        if target.name == "http":
            with pytest.raises(StorageError, match="listing is not supported over plain HTTP"):
                [x async for x in store.list("a/")]
            return
        got = [x async for x in store.list("a/")]
        assert [x.key for x in got] == [f"a/{i:02d}.bin" for i in range(5)]
        assert [x.size for x in got] == [len(k) * (i + 1) for i, k in enumerate(keys[:5])]
        everything = sorted(x.key for x in [x async for x in store.list()])
        assert everything == sorted(keys)
        assert [x.key async for x in store.list("a")] == [*keys[:5], "ab.bin"]
        assert [x async for x in store.list("zzz/")] == []
    finally:
        await store.aclose()


# characters a key may hold that URL encoding, XML or a shell would change: '+' (a space once
# form-decoded), '%41' ('A' once percent-decoded), a space, '&', '=', '~', a non-ASCII letter
ODD_KEYS = [
    "odd/a+b.bin",
    "odd/x%41y.bin",
    "odd/two words.bin",
    "odd/q&r=s~t.bin",
    "odd/\u00e9.bin",
]


async def test_keys_with_characters_that_encodings_change(target: Target) -> None:
    await seeded(target, {k: k.encode() * 3 for k in ODD_KEYS})
    store = target.open()
    try:
        for k in ODD_KEYS:
            assert await store.get_range(k) == k.encode() * 3, k
            assert await store.get_range(k, 1, 4) == (k.encode() * 3)[1:4], k
            info = await store.head(k)
            assert (info.key, info.size) == (k, len(k.encode()) * 3), k
        if target.name != "http":  # no listing over plain HTTP (test_list_with_pagination)
            listed = [(x.key, x.size) async for x in store.list("odd/")]
            assert sorted(listed) == sorted((k, len(k.encode()) * 3) for k in ODD_KEYS)
    finally:
        await store.aclose()


async def test_a_root_with_characters_that_encodings_change(rooted_target: Target) -> None:
    target = rooted_target
    root = Target(target.name, f"{target.url}/r+%41 \u00e9&", target.options)
    await seeded(root, {"k+%41.bin": b"inside", "sub/x y.bin": b"deeper"})
    store = root.open()
    try:
        assert await store.get_range("k+%41.bin") == b"inside"
        assert (await store.head("sub/x y.bin")).size == 6
        assert sorted([x.key async for x in store.list()]) == ["k+%41.bin", "sub/x y.bin"]
        assert [x.key async for x in store.list("sub/")] == ["sub/x y.bin"]
    finally:
        await store.aclose()
    outer = target.open()
    try:  # the objects sit under the root as named, seen from the store one level up
        listed = sorted([x.key async for x in outer.list()])
        assert listed == ["r+%41 \u00e9&/k+%41.bin", "r+%41 \u00e9&/sub/x y.bin"]
    finally:
        await outer.aclose()


async def test_large_object_multipart(target: Target, tmp_path: object) -> None:
    size = 11 << 20  # three 5 MiB S3 parts, eleven 1 MiB Azure blocks, a resumable GCS upload
    big = random.Random(3).randbytes(size)
    src = os.path.join(str(tmp_path), "big.bin")
    with open(src, "wb") as f:
        f.write(big)
    w = target.writer()
    try:
        await w.put_file("big/big.bin", src)
    finally:
        await w.aclose()
    store = target.open()
    try:
        assert (await store.head("big/big.bin")).size == size
        dest = os.path.join(str(tmp_path), "back.bin")
        assert await store.get_to_file("big/big.bin", dest) == size
        with open(dest, "rb") as f:
            assert f.read() == big
        assert await store.get_range("big/big.bin", size - 7) == big[-7:]
    finally:
        await store.aclose()


async def test_32_concurrent_ranged_reads(target: Target) -> None:
    await seeded(target, {"c.bin": DATA})
    store = target.open()
    rng = random.Random(11)
    starts = [rng.randrange(0, 95_000) for _ in range(32)]
    ranges = [(a, a + rng.randrange(1, 5000)) for a in starts]
    try:
        got = await asyncio.gather(*(store.get_range("c.bin", a, b) for a, b in ranges))
        assert got == [DATA[a:b] for a, b in ranges]
    finally:
        await store.aclose()


async def test_aclose_idempotent(target: Target) -> None:
    await seeded(target, {"x.bin": b"xyz"})
    store = target.open()
    assert await store.get_range("x.bin") == b"xyz"
    await store.aclose()
    await store.aclose()
    fresh = target.open()
    await fresh.aclose()  # never used: closing must not create a session
    await fresh.aclose()


async def test_put_replaces_and_head_etag(target: Target) -> None:
    if target.name == "http":
        store = target.open()
        with pytest.raises(StorageError, match="HTTP stores are read-only"):
            await store.put("k", b"v")
        await store.aclose()
        return
    store = target.open()
    try:
        await store.put("k/v.bin", b"one")
        first = await store.head("k/v.bin")
        await store.put("k/v.bin", b"second")
        assert await store.get_range("k/v.bin") == b"second"
        second = await store.head("k/v.bin")
        assert isinstance(second, ObjectInfo) and second.size == 6 and first.size == 3
    finally:
        await store.aclose()
