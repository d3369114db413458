"""Writing to object storage is as safe as writing to a local directory.

On every cloud backend -- S3 read directly and through the SDK, GCS (fake-gcs-server, and
behind :class:`~astream.testing.GcsConditionProxy` with every upload resumable: the emulator
ignores ``ifGenerationMatch`` there), Azure (Azurite):

- a non-empty prefix is refused unless ``exist_ok=True`` (``--exist-ok``), as a local one is;
- ``exist_ok=True`` replaces the dataset cleanly: the old objects are gone, readers (a warm
  cache included) see exactly the new samples;
- two writers racing on one prefix (two ``AsyncMDSWriter`` in one loop, two processes) never
  publish a mix: at least one fails naming the prefix, and what is published reads exactly one
  writer's samples, or nothing is published.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from astream import LocalDataset, MDSWriter, StreamingDataset
from astream.aio import AsyncMDSWriter
from astream.cli import main as cli_main
from astream.errors import (
    AstreamError,
    ObjectChangedError,
    OutputExistsError,
    TransientStorageError,
)
from astream.storage import RetryPolicy, open_store
from astream.storage import sync as store_sync
from astream.testing import GcsConditionProxy
from astream.writer.remote import make_sink

COLUMNS = {"id": "int", "tag": "str", "blob": "bytes"}
FAST = RetryPolicy(attempts=4, timeout=20.0, backoff_base=0.001, backoff_max=0.01)
BACKENDS = ["s3", "s3-sdk", "gcs", "gcs-resumable", "azure"]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def samples(n: int, tag: str) -> list[dict[str, Any]]:
    """Samples that say whose they are; ``tag`` sizes them differently per writer."""
    width = 40 + 13 * len(tag)
    return [{"id": i, "tag": tag, "blob": bytes([i % 251]) * (width + i % 17)} for i in range(n)]


@dataclass
class Remote:
    """A fresh prefix on one backend. ``options``: what a store needs beyond the environment
    (the fixtures export the emulators' endpoints there), passed to writers explicitly."""

    name: str
    url: str
    options: dict[str, Any] = field(default_factory=dict)

    def store(self) -> Any:
        return open_store(self.url, retry=FAST, **self.options)

    def objects(self) -> list[str]:
        async def go() -> list[str]:
            s = self.store()
            try:
                return sorted([o.key async for o in s.list()])
            finally:
                await s.aclose()

        return asyncio.run(go())

    def writer(self, exist_ok: bool = False, **kw: Any) -> MDSWriter:
        """An MDSWriter on this prefix (through its sink when the store needs options)."""
        if self.options:
            opts = dict(self.options)
            kw["sink_factory"] = lambda r, lo, k: make_sink(
                r, lo, k, store_options=opts, exist_ok=exist_ok
            )
        return MDSWriter(out=self.url, columns=COLUMNS, exist_ok=exist_ok, **kw)

    def async_writer(self, exist_ok: bool = False, **kw: Any) -> AsyncMDSWriter:
        return AsyncMDSWriter(
            out=self.url,
            columns=COLUMNS,
            exist_ok=exist_ok,
            storage_options=dict(self.options),
            retry=FAST,
            **kw,
        )


@pytest.fixture(scope="module")
def gcs_proxy(gcs_server: Any) -> Iterator[GcsConditionProxy]:
    proxy = GcsConditionProxy(gcs_server.url).start()
    yield proxy
    proxy.stop()


@pytest.fixture(params=BACKENDS)
def remote(request: pytest.FixtureRequest) -> Remote:
    return make_remote(request.param, request)


@pytest.fixture(params=["s3", "gcs", "azure"])
def env_remote(request: pytest.FixtureRequest) -> Remote:
    """A backend the CLI reaches from the environment alone."""
    return make_remote(request.param, request)


def make_remote(name: str, request: pytest.FixtureRequest) -> Remote:
    tail = f"safety-{uuid.uuid4().hex[:10]}"
    if name in ("s3", "s3-sdk"):
        bucket = request.getfixturevalue("s3_bucket")
        return Remote(name, f"{bucket}/{tail}", {} if name == "s3" else {"direct": False})
    if name == "gcs":
        return Remote(name, f"{request.getfixturevalue('gcs_bucket')}/{tail}")
    if name == "gcs-resumable":
        bucket = request.getfixturevalue("gcs_bucket")
        proxy = request.getfixturevalue("gcs_proxy")
        return Remote(name, f"{bucket}/{tail}", {"api_root": proxy.url, "resumable_threshold": 0})
    return Remote(name, f"{request.getfixturevalue('azure_container')}/{tail}")


def write(remote: Remote, data: list[dict[str, Any]], exist_ok: bool = False, **kw: Any) -> None:
    with remote.writer(exist_ok=exist_ok, size_limit=kw.pop("size_limit", 2048), **kw) as w:
        for s in data:
            w.write(s)


def published(remote: Remote, tmp: str) -> list[dict[str, Any]] | None:
    """The samples the prefix's index.json publishes; None when it publishes none."""
    if "index.json" not in remote.objects():
        return None
    dest = os.path.join(tmp, f"back-{uuid.uuid4().hex[:6]}")
    store_sync.download(remote.url, dest)
    with open(os.path.join(dest, "index.json")) as f:
        if not json.load(f)["shards"]:
            return None
    ds = LocalDataset(dest)
    return [ds[i] for i in range(len(ds))]


def names_prefix(err: BaseException, remote: Remote) -> bool:
    return isinstance(err, AstreamError) and remote.url in str(err)


# -- a non-empty prefix is refused -------------------------------------------------------------


def test_non_empty_prefix_is_refused(remote: Remote, tmp_path: Any) -> None:
    first = samples(60, "a")
    write(remote, first)
    before = remote.objects()
    with pytest.raises(OutputExistsError) as ei:
        remote.writer()
    assert names_prefix(ei.value, remote) and "exist_ok=True" in str(ei.value)

    async def again() -> None:
        async with remote.async_writer() as w:
            await w.write(samples(1, "b")[0])

    with pytest.raises(OutputExistsError) as ei2:
        asyncio.run(again())
    assert names_prefix(ei2.value, remote)
    assert remote.objects() == before  # nothing written, nothing deleted
    assert published(remote, str(tmp_path)) == first


@pytest.mark.parametrize("workers", ["1", "2"])
def test_convert_refuses_a_non_empty_prefix(
    env_remote: Remote, tmp_path: Any, capsys: pytest.CaptureFixture[str], workers: str
) -> None:
    remote = env_remote
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text("".join(json.dumps({"id": i, "t": "a" * i}) + "\n" for i in range(40)))
    b.write_text("".join(json.dumps({"id": i, "t": "b"}) + "\n" for i in range(7)))
    assert cli_main(["convert", str(a), remote.url, "--workers", workers]) == 0
    capsys.readouterr()
    assert cli_main(["convert", str(b), remote.url, "--workers", workers]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"astream: error: out: {remote.url!r} is not empty (pass --exist-ok to replace it)\n"
    )
    assert [r["id"] for r in published(remote, str(tmp_path)) or []] == list(range(40))
    args = ["convert", str(b), remote.url, "--workers", workers, "--exist-ok"]
    assert cli_main(args) == 0, capsys.readouterr().err
    got = published(remote, str(tmp_path)) or []
    assert [(r["id"], r["t"]) for r in got] == [(i, "b") for i in range(7)]


# -- exist_ok replaces cleanly ---------------------------------------------------------------


@pytest.mark.parametrize("hashes", [["xxh64"], None], ids=["hashes", "no-hashes"])
def test_exist_ok_replaces_the_dataset_cleanly(
    remote: Remote, tmp_path: Any, hashes: list[str] | None
) -> None:
    # same sample sizes: the new shards share names, sizes and counts with old ones. A warm
    # reader keeps a cached shard across an index change only when its entry is unchanged
    # and pins the bytes with a digest; without hashes every such entry looks unchanged
    old, new = samples(150, "old"), samples(40, "new")
    write(remote, old, size_limit=1500, hashes=hashes)
    old_keys = remote.objects()
    assert len(old_keys) > 6
    cache = str(tmp_path / "cache")  # a reader with the old dataset cached
    ds = StreamingDataset(remote=remote.url, local=cache, batch_size=8)
    assert sorted(s["id"] for s in ds) == list(range(150))

    with remote.writer(exist_ok=True, size_limit=1500, hashes=hashes) as w:
        for s in new:
            w.write(s)
    new_shards = [e.raw_data.basename for e in w.shards]
    # the new index names only new shards; the old shards it shares names with were replaced,
    # those it no longer names are deleted: nothing of the old dataset stays under the prefix
    assert 1 < len(new_shards) < len(old_keys) - 1
    assert remote.objects() == sorted([*new_shards, "index.json"])
    assert published(remote, str(tmp_path)) == new
    ds2 = StreamingDataset(remote=remote.url, local=cache, batch_size=8)
    got = sorted(ds2, key=lambda s: int(s["id"]))
    assert [(int(s["id"]), s["tag"], s["blob"]) for s in got] == [
        (s["id"], s["tag"], s["blob"]) for s in new
    ]


def test_async_writer_exist_ok_replaces(remote: Remote, tmp_path: Any) -> None:
    write(remote, samples(80, "old"))
    new = samples(20, "async")

    async def go() -> None:
        async with remote.async_writer(exist_ok=True, size_limit=1 << 16) as w:
            for s in new:
                await w.write(s)

    asyncio.run(go())
    assert published(remote, str(tmp_path)) == new
    assert all(k == "index.json" or k.startswith("shard.") for k in remote.objects())
    assert len(remote.objects()) == 2  # 20 small samples: one shard and the index


# -- racing writers ---------------------------------------------------------------------------


async def _race(remote: Remote, exist_ok: bool, tags: tuple[str, str]) -> list[Any]:
    """Two AsyncMDSWriters on one loop; each writes only once both have checked (or claimed)
    the prefix, so both believe it is theirs."""
    barrier = asyncio.Barrier(2)

    async def one(tag: str) -> str:
        w = remote.async_writer(exist_ok=exist_ok, size_limit=1024, max_concurrency=2)
        try:
            await w.__aenter__()
        except BaseException:
            await barrier.abort()
            raise
        try:
            try:
                await barrier.wait()
            except asyncio.BrokenBarrierError:
                pass
            for s in samples(120, tag):
                await w.write(s)
        except BaseException as exc:
            await w.__aexit__(type(exc), exc, None)
            raise
        await w.aclose()
        return tag

    return await asyncio.gather(one(tags[0]), one(tags[1]), return_exceptions=True)


def _check_race(remote: Remote, results: list[Any], tags: tuple[str, str], tmp: str) -> None:
    failed = [r for r in results if isinstance(r, BaseException)]
    assert failed, f"both writers succeeded: {results}"
    for err in failed:
        assert isinstance(err, ObjectChangedError | OutputExistsError), repr(err)
        assert names_prefix(err, remote), str(err)
    got = published(remote, tmp)
    won = [r for r in results if isinstance(r, str)]
    if got is None:
        assert not won, f"{won} succeeded but nothing is published"
        return
    assert got in (samples(120, tags[0]), samples(120, tags[1])), "a mixed dataset"
    assert won == [got[0]["tag"]]


def test_two_async_writers_racing(remote: Remote, tmp_path: Any) -> None:
    tags = ("alpha", "bravo-b")
    results = asyncio.run(_race(remote, False, tags))
    _check_race(remote, results, tags, str(tmp_path))


def test_two_async_writers_racing_to_replace(remote: Remote, tmp_path: Any) -> None:
    write(remote, samples(50, "old"))
    tags = ("alpha", "bravo-b")
    results = asyncio.run(_race(remote, True, tags))
    _check_race(remote, results, tags, str(tmp_path))


PROCESS = r"""
import json, os, sys, time
from astream import MDSWriter
from astream.writer.remote import make_sink
url, tag, gate = sys.argv[1:4]
opts, exist_ok = json.loads(sys.argv[4]), sys.argv[5] == "1"
width = 40 + 13 * len(tag)
kw = {}
if opts:
    kw["sink_factory"] = lambda r, lo, k: make_sink(r, lo, k, store_options=opts, exist_ok=exist_ok)
def wait_for_both():
    open(os.path.join(gate, tag), "w").close()
    end = time.time() + 60
    while len(os.listdir(gate)) < 2 and time.time() < end:
        time.sleep(0.005)
try:
    w = MDSWriter(out=url, columns={"id": "int", "tag": "str", "blob": "bytes"},
                  size_limit=1024, exist_ok=exist_ok, **kw)
except Exception as e:
    wait_for_both()
    print("ERR", type(e).__name__, e); sys.exit(3)
wait_for_both()
try:
    with w:
        for i in range(120):
            w.write({"id": i, "tag": tag, "blob": bytes([i % 251]) * (width + i % 17)})
except Exception as e:
    print("ERR", type(e).__name__, e); sys.exit(2)
print("OK")
"""


@pytest.mark.parametrize("exist_ok", [False, True])
def test_two_processes_racing(remote: Remote, tmp_path: Any, exist_ok: bool) -> None:
    if exist_ok:
        write(remote, samples(50, "old"))
    gate = tmp_path / "gate"
    gate.mkdir()
    tags = ("alpha", "bravo-b")
    args = [json.dumps(remote.options), "1" if exist_ok else "0"]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", PROCESS, remote.url, t, str(gate), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        for t in tags
    ]
    outs = [p.communicate(timeout=240) for p in procs]
    results: list[Any] = []
    for t, p, (out, err) in zip(tags, procs, outs):
        if p.returncode == 0:
            assert out.strip() == "OK", err
            results.append(t)
        else:
            assert out.startswith("ERR "), err
            kind, _, msg = out[4:].strip().partition(" ")
            assert kind in ("ObjectChangedError", "OutputExistsError"), out
            results.append(ObjectChangedError(msg) if kind == "ObjectChangedError" else None)
            assert remote.url in msg, msg
    failed = [r for r in results if not isinstance(r, str)]
    assert failed, f"both processes succeeded: {outs}"
    got = published(remote, str(tmp_path))
    won = [r for r in results if isinstance(r, str)]
    if got is None:
        assert not won
    else:
        assert got in (samples(120, tags[0]), samples(120, tags[1])), "a mixed dataset"
        assert won == [got[0]["tag"]]


# -- the conditional-write protocol of the store --------------------------------------------


def test_store_conditional_writes(remote: Remote, tmp_path: Any) -> None:
    big = os.urandom(3 << 20)
    path = tmp_path / "big.bin"
    path.write_bytes(big)
    opts = {"s3": {"multipart_threshold": 5 << 20, "part_size": 5 << 20}, "azure": {}}
    extra: dict[str, Any] = {}
    if remote.name.startswith("s3"):
        extra = opts["s3"]
        path.write_bytes(big * 2)  # 6 MiB: a multipart upload
    elif remote.name == "azure":
        extra = {"max_single_put_size": 1 << 20, "max_block_size": 1 << 20}  # staged blocks
    wrong = "1234" if remote.name.startswith("gcs") else '"0x8D00000DEADBEEF"'

    async def go() -> None:
        s = open_store(remote.url, retry=FAST, **remote.options, **extra)
        try:
            v1 = await s.put_if("a", b"one")
            assert v1 == (await s.head("a")).etag
            with pytest.raises(ObjectChangedError, match="already exists"):
                await s.put_if("a", b"two")
            with pytest.raises(ObjectChangedError, match="no longer the version"):
                await s.put_if("a", b"two", expect=wrong)
            with pytest.raises(ObjectChangedError):
                await s.put_if("absent", b"two", expect=v1)
            v2 = await s.put_if("a", b"three", expect=v1)
            assert v2 != v1 and await s.get_range("a") == b"three"
            with pytest.raises(ObjectChangedError):
                await s.put_if("a", b"four", expect=v1)  # v1 is gone
            await s.put_file_if("big", str(path))
            if remote.name != "gcs":  # fake-gcs-server ignores it on resumable uploads
                with pytest.raises(ObjectChangedError):
                    await s.put_file_if("big", str(path))
                with pytest.raises(ObjectChangedError):
                    await s.delete("a", expect=wrong)
            assert await s.get_range("a") == b"three"
            await s.delete("a", expect=v2)
            await s.delete("a")  # already gone: nothing to do
            assert [o.key async for o in s.list()] == ["big"]
        finally:
            await s.aclose()

    asyncio.run(go())


def test_lost_answer_of_a_conditional_write_is_its_own_success(remote: Remote) -> None:
    """An attempt that succeeded but whose answer was lost is retried; the retry's refusal is
    recognised as this write's own success (same bytes there), never another writer's."""

    async def go() -> None:
        s = open_store(remote.url, retry=FAST, **remote.options)
        raw: Any = s.raw  # type: ignore[attr-defined]
        real = raw.put_if
        calls: list[str] = []

        def flaky(after: bool) -> Callable[..., Any]:
            async def put_if(key: str, data: bytes, expect: str | None) -> str:
                calls.append(key)
                if len(calls) == 1 and not after:
                    raise TransientStorageError("connection failed (reset)", key)
                v: str = await real(key, data, expect)
                if len(calls) == 1:
                    raise TransientStorageError("connection failed (answer lost)", key)
                return v

            return put_if

        try:
            raw.put_if = flaky(after=True)
            v = await s.put_if("k", b"mine")
            assert len(calls) == 2 and v == (await s.head("k")).etag
            calls.clear()
            raw.put_if = flaky(after=False)  # the refusal then is about another's bytes
            with pytest.raises(ObjectChangedError):
                await s.put_if("k", b"other")
            assert await s.get_range("k") == b"mine"
        finally:
            await s.aclose()

    asyncio.run(go())


def test_gcs_proxy_checked_every_condition(gcs_proxy: GcsConditionProxy, gcs_bucket: str) -> None:
    """Through the proxy, a replacement's uploads are resumable and each carries its condition:
    shards ``ifGenerationMatch=0``, the final index the claim's generation, deletes theirs."""
    remote = Remote(
        "gcs-resumable",
        f"{gcs_bucket}/proxied-{uuid.uuid4().hex[:8]}",
        {"api_root": gcs_proxy.url, "resumable_threshold": 0},
    )
    write(remote, samples(30, "old"))
    mark = len(gcs_proxy.conditions)
    write(remote, samples(30, "new"), exist_ok=True)
    seen = [c for c in gcs_proxy.conditions[mark:] if remote.url.split("/", 3)[3] in c[2]]
    kinds = {(m, k) for m, k, _, _, _ in seen}
    assert {("DELETE", "delete"), ("POST", "resumable"), ("PUT", "resumable-final")} <= kinds
    # index.json twice: the claim (on the old index's generation), the publication (on the
    # claim's); both conditioned on a generation, never "0"
    finals = [c for c in seen if c[1] == "resumable-final" and c[2].endswith("index.json")]
    assert len(finals) == 2 and all(c[3] != "0" and c[4] == 200 for c in finals)
    assert finals[0][3] != finals[1][3]
    deletes = [c for c in seen if c[1] == "delete"]
    assert deletes and all(c[3] != "0" and c[4] == 200 for c in deletes)
    shards = [c for c in seen if c[1] == "resumable-final" and ".mds" in c[2]]
    assert shards and all(c[3] == "0" and c[4] == 200 for c in shards)
