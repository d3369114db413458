"""``hf://`` against the test Hub (astream.testing.hub): the storage contract, the pinned
revision, credentials, the CDN redirect, 429 with Retry-After, and error mapping."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from typing import Any

import pytest

from astream.errors import (
    AccessDeniedError,
    ConfigError,
    ObjectChangedError,
    ObjectNotFoundError,
    StorageError,
    StorageTimeoutError,
)
from astream.storage import RetryPolicy, open_store
from astream.storage.hf import PINS_ENV, parse_hf_url
from astream.testing.hub import HubServer

from .conftest import FAST, HUB_TOKEN, Target, make_target
from .test_contract import (  # noqa: F401  (the contract, collected here for the hf target)
    seeded,
    test_32_concurrent_ranged_reads,
    test_a_root_with_characters_that_encodings_change,
    test_aclose_idempotent,
    test_get_to_file,
    test_keys_with_characters_that_encodings_change,
    test_large_object_multipart,
    test_list_with_pagination,
    test_missing_object,
    test_put_replaces_and_head_etag,
    test_ranges,
)


@pytest.fixture
def target(request: pytest.FixtureRequest, tmp_path: Any) -> Target:
    return make_target("hf", request, tmp_path)


@pytest.fixture
def rooted_target(request: pytest.FixtureRequest, tmp_path: Any) -> Target:
    return make_target("hf", request, tmp_path)


def new_repo(hub: HubServer, files: dict[str, bytes], *, gated: bool = False) -> str:
    repo = f"org/r-{uuid.uuid4().hex[:10]}"
    hub.create_repo(repo, gated=gated)
    hub.push(repo, files)
    return repo


def opened(hub: HubServer, url: str, **kw: Any) -> Any:
    return open_store(url, retry=kw.pop("retry", FAST), endpoint=hub.url, **kw)


def test_url_forms() -> None:
    assert parse_hf_url("hf://datasets/o/r") == ("o/r", "main", "")
    assert parse_hf_url("hf://datasets/o/r@dev/a/b.bin") == ("o/r", "dev", "a/b.bin")
    assert parse_hf_url("hf://datasets/o/r@refs/convert/parquet/default/train") == (
        "o/r",
        "refs/convert/parquet",
        "default/train",
    )
    assert parse_hf_url("hf://datasets/o/r@refs%2Fpr%2F3/x") == ("o/r", "refs/pr/3", "x")
    with pytest.raises(ConfigError, match="only dataset repositories"):
        parse_hf_url("hf://models/o/r")
    with pytest.raises(ConfigError, match="expected hf://datasets/<org>/<repo>"):
        parse_hf_url("hf://datasets/o")


async def test_pinned_commit_survives_a_push(hf_hub: HubServer) -> None:
    repo = new_repo(hf_hub, {"d/a.bin": b"old" * 500, "d/s.txt": b"small-old"})
    store = opened(hf_hub, f"hf://datasets/{repo}/d")
    try:
        assert await store.get_range("s.txt") == b"small-old"
        hf_hub.push(repo, {"d/a.bin": b"new" * 500, "d/s.txt": b"small-new", "d/c.bin": b"c"})
        assert await store.get_range("a.bin", 0, 6) == b"oldold"
        assert await store.get_range("s.txt") == b"small-old"
        assert sorted([o.key async for o in store.list()]) == ["a.bin", "s.txt"]
    finally:
        await store.aclose()
    again = opened(hf_hub, f"hf://datasets/{repo}/d")  # a worker's store: the same commit
    try:
        assert await again.get_range("s.txt") == b"small-old"
    finally:
        await again.aclose()
    # a process started now (a spawned DataLoader worker) reads the pinned commit too
    code = (
        "import asyncio, sys\nfrom astream.storage import open_store\n"
        f"s = open_store('hf://datasets/{repo}/d', endpoint='{hf_hub.url}')\n"
        "async def m():\n    sys.stdout.write((await s.get_range('s.txt')).decode())\n"
        "    await s.aclose()\nasyncio.run(m())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ}, timeout=120, check=True).stdout  # fmt: skip
    assert out == "small-old"
    assert PINS_ENV in os.environ


async def test_revision_with_a_slash_is_encoded_and_read(hf_hub: HubServer) -> None:
    repo = new_repo(hf_hub, {"README.md": b"main"})
    hf_hub.push(repo, {"default/train/0000.parquet": b"P" * 10}, branch="refs/convert/parquet")
    store = opened(hf_hub, f"hf://datasets/{repo}@refs/convert/parquet/default")
    try:
        assert await store.get_range("train/0000.parquet") == b"P" * 10
        assert [o.key async for o in store.list()] == ["train/0000.parquet"]
    finally:
        await store.aclose()
    asked = [p for h, _, p, _ in hf_hub.log if h == "hub" and f"/{repo}/revision/" in p]
    assert asked[-1].endswith("/revision/refs%2Fconvert%2Fparquet")


async def test_gated_repo_needs_a_token(
    hf_hub: HubServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    repo = new_repo(hf_hub, {"x.bin": b"secret"}, gated=True)
    sha = hf_hub.repos[repo].branches["main"]
    url = f"hf://datasets/{repo}@{sha}"  # a commit: no revision request first
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # not installed: the token file
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-home"))
    for kw, status in (({}, "HTTP 401"), ({"token": "hf_wrong"}, "HTTP 403")):
        store = opened(hf_hub, url, **kw)
        try:
            with pytest.raises(AccessDeniedError, match=status) as ei:
                await store.get_range("x.bin")
            assert ei.value.url == f"{url}/x.bin" and "hf_wrong" not in str(ei.value)
        finally:
            await store.aclose()
    home = tmp_path / "home"
    home.mkdir()
    (home / "token").write_text(HUB_TOKEN + "\n")
    monkeypatch.setenv("HF_HOME", str(home))
    for env in ({}, {"HF_TOKEN": HUB_TOKEN, "HF_HOME": str(tmp_path / "empty-home")}):
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        store = opened(hf_hub, url)
        try:
            assert await store.get_range("x.bin") == b"secret"
        finally:
            await store.aclose()


async def test_lfs_reads_follow_the_cdn_redirect_without_the_token(hf_hub: HubServer) -> None:
    big = os.urandom(5000)
    repo = new_repo(hf_hub, {"big.bin": big}, gated=True)
    assert hf_hub.is_lfs(repo, "big.bin")
    store = opened(hf_hub, f"hf://datasets/{repo}", token=HUB_TOKEN)
    before = len(hf_hub.log)
    try:
        assert await store.get_range("big.bin", 100, 4000) == big[100:4000]
        info = await store.head("big.bin")
        listed = [o async for o in store.list()]
        assert info.size == 5000 and listed[0].etag == info.etag and len(info.etag) == 64
        tail_info, tail = await store.get_tail("big.bin", 300)  # one suffix-range GET
        assert tail == big[-300:] and tail_info == info
        seen: list[str] = []
        assert await store.get_range("big.bin", 0, 10, seen=seen) == big[:10]
        assert seen == [info.etag]
        with pytest.raises(ObjectChangedError):
            await store.get_range("big.bin", 0, 10, etag="0" * 64)
    finally:
        await store.aclose()
    cdn = [x for x in hf_hub.log[before:] if x[0] == "cdn"]
    hub = [x for x in hf_hub.log[before:] if x[0] == "hub"]
    assert cdn and not any(auth for *_, auth in cdn)  # never the token to another origin
    assert hub and all(auth for *_, auth in hub)


async def test_faults_at_the_hub_are_retried_and_bodies_resumed(
    target: Target, make_proxy: Any
) -> None:
    data = os.urandom(900)  # below the LFS threshold: answered by the Hub itself
    await seeded(target, {"f.bin": data, **{f"l/{i}.bin": b"x" for i in range(7)}})
    proxy = make_proxy(target.upstream)
    store: Any = target.open(proxy=proxy)  # a RetryingStore: its retry causes
    try:
        proxy.plan("truncate", "503", "reset", path="/resolve/")
        assert await store.get_range("f.bin") == data
        assert store.causes["truncated"] == 1 and store.causes["5xx"] == 1
        proxy.plan("503", "ok", "503", path="/tree/")  # pages 1 and 2 each fail once
        assert [o.key async for o in store.list("l/")] == [f"l/{i}.bin" for i in range(7)]
        assert store.causes["5xx"] == 3
    finally:
        await store.aclose()


async def test_429_waits_as_long_as_retry_after_asks(hf_hub: HubServer) -> None:
    repo = new_repo(hf_hub, {"a.txt": b"abc"})
    sha = hf_hub.repos[repo].branches["main"]
    url = f"hf://datasets/{repo}@{sha}"
    store = opened(hf_hub, url)  # FAST: backoff of at most 10 ms
    try:
        hf_hub.throttle(2, retry_after=0.4)
        t0 = time.monotonic()
        assert await store.get_range("a.txt") == b"abc"
        assert time.monotonic() - t0 >= 0.8
        assert store.causes["throttle"] == 2
    finally:
        await store.aclose()
    short = opened(hf_hub, url, retry=RetryPolicy(attempts=5, deadline=0.5, backoff_base=0.001))
    try:
        hf_hub.throttle(1, retry_after=3)
        t0 = time.monotonic()
        with pytest.raises(StorageTimeoutError, match=r"deadline of 0\.5s"):
            await short.get_range("a.txt")
        assert time.monotonic() - t0 < 0.5  # gives up at once: the wait would pass the deadline
    finally:
        hf_hub._throttle.clear()
        await short.aclose()


async def test_missing_repo_revision_and_file(hf_hub: HubServer) -> None:
    repo = new_repo(hf_hub, {"a.txt": b"abc"})
    for url, key in (
        ("hf://datasets/org/no-such-repo", "a.txt"),
        (f"hf://datasets/{repo}@no-such-branch", "a.txt"),
        (f"hf://datasets/{repo}", "b.txt"),
    ):
        store = opened(hf_hub, url)
        try:
            with pytest.raises(ObjectNotFoundError):
                await store.get_range(key)
        finally:
            await store.aclose()
    store = opened(hf_hub, f"hf://datasets/{repo}")
    try:
        assert [o async for o in store.list("nodir/")] == []
        with pytest.raises(StorageError, match="conditional single-file writes are not supp"):
            await store.put_if("k", b"v")
    finally:
        await store.aclose()


async def test_put_commits_and_the_store_reads_its_own_commit(hf_hub: HubServer) -> None:
    repo = new_repo(hf_hub, {})
    n = hf_hub.commits(repo)
    store = opened(hf_hub, f"hf://datasets/{repo}/p", token=HUB_TOKEN)
    try:
        await store.put("big.bin", b"L" * 3000)
        await store.put("small.txt", b"s")
        await store.delete("small.txt")
        await store.delete("small.txt")  # already absent: no commit
        assert hf_hub.commits(repo) == n + 3
        assert hf_hub.files(repo) == {"p/big.bin": b"L" * 3000}
        assert hf_hub.is_lfs(repo, "p/big.bin")
        assert await store.get_range("big.bin", 2990) == b"L" * 10
    finally:
        await store.aclose()
    anonymous = opened(hf_hub, f"hf://datasets/{repo}/p")
    try:
        with pytest.raises(AccessDeniedError):
            await anonymous.put("x", b"y")
    finally:
        await anonymous.aclose()
