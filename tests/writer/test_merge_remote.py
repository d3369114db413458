"""``merge_index`` onto an object store (S3 through moto, GCS through fake-gcs-server, Azure
through Azurite) publishes its ``index.json`` as the writers do: by one conditional write.

As in the reference, an index already at ``out`` is replaced (merging again after adding a
part is the normal use). The write is conditioned on the version of ``out/index.json`` seen
before the merge read its parts, so a publication in between (another merge, a writer
claiming the prefix with ``exist_ok=True``) makes this merge fail with ``ObjectChangedError``
naming ``out``, and what the other one published stands. The in-between publications are
made from inside the merge (its first sub-index read), so the race is the same every run.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from astream import merge_index
from astream.errors import ConfigError, ObjectChangedError, StorageTimeoutError
from astream.writer import merge as merge_mod
from astream.writer.remote import RemoteIndexLocator

from .test_remote_safety import Remote, make_remote, names_prefix, published, samples, write


@pytest.fixture(params=["s3", "gcs", "azure"])
def remote(request: pytest.FixtureRequest) -> Remote:
    """A backend ``merge_index`` reaches from the environment alone (it takes no options)."""
    return make_remote(request.param, request)


def part(remote: Remote, k: int) -> Remote:
    return Remote(remote.name, f"{remote.url}/part{k}", dict(remote.options))


def tagged(k: int) -> list[dict[str, Any]]:
    return samples(30 + 7 * k, f"p{k}")


def index_bytes(remote: Remote) -> bytes:
    async def go() -> bytes:
        store = remote.store()
        try:
            return bytes(await store.get_range("index.json"))
        finally:
            await store.aclose()

    return asyncio.run(go())


class _Meddler(RemoteIndexLocator):
    """The real locator; right after its first sub-index read it runs ``meddle`` (another
    party publishing at ``out`` while this merge runs)."""

    def __init__(self, meddle: Callable[[], None]) -> None:
        self.meddle: Callable[[], None] | None = meddle

    def read(self, url: str, timeout: float) -> bytes:
        data = super().read(url, timeout)
        meddle, self.meddle = self.meddle, None
        if meddle is not None:
            merge_mod.register_remote_locator(None)  # the other party uses the plain one
            try:
                meddle()
            finally:
                merge_mod.register_remote_locator(self)
        return data


@pytest.fixture
def meddling() -> Iterator[Callable[[Callable[[], None]], None]]:
    def install(meddle: Callable[[], None]) -> None:
        merge_mod.register_remote_locator(_Meddler(meddle))

    yield install
    merge_mod.register_remote_locator(None)


def test_merge_publishes_and_replaces_its_index(remote: Remote, tmp_path: Any) -> None:
    for k in range(2):
        write(part(remote, k), tagged(k))
    merge_index(remote.url)
    assert published(remote, str(tmp_path)) == tagged(0) + tagged(1)
    write(part(remote, 2), tagged(2))
    merge_index(remote.url)  # an index is there: replaced, as the reference does
    assert published(remote, str(tmp_path)) == tagged(0) + tagged(1) + tagged(2)
    doc = json.loads(index_bytes(remote))
    assert doc["version"] == 2
    assert sorted({s["raw_data"]["basename"].split("/")[0] for s in doc["shards"]}) == [
        "part0",
        "part1",
        "part2",
    ]


@pytest.mark.parametrize("before", ["absent", "present"])
def test_a_merge_racing_a_merge_publishes_nothing(
    remote: Remote, tmp_path: Any, meddling: Any, before: str
) -> None:
    for k in range(3):
        write(part(remote, k), tagged(k))
    if before == "present":
        merge_index([f"{remote.url}/part0/index.json"], remote.url)
    urls = [f"{remote.url}/part{k}/index.json" for k in range(3)]
    meddling(lambda: merge_index(urls[1:], remote.url))  # the other merge: parts 1 and 2
    with pytest.raises(ObjectChangedError) as err:
        merge_index(urls, remote.url)
    assert names_prefix(err.value, remote), str(err.value)
    assert "merge_index" in str(err.value) and "published nothing" in str(err.value)
    assert published(remote, str(tmp_path)) == tagged(1) + tagged(2)  # the other one stands


def test_a_merge_racing_a_writer_that_replaces_the_prefix(
    remote: Remote, tmp_path: Any, meddling: Any
) -> None:
    for k in range(2):
        write(part(remote, k), tagged(k))
    new = samples(25, "writer")
    meddling(lambda: write(remote, new, exist_ok=True))  # claims index.json, deletes the parts
    with pytest.raises(ObjectChangedError) as err:  # the merge had read its one part by then
        merge_index([f"{remote.url}/part1/index.json"], remote.url)
    assert names_prefix(err.value, remote), str(err.value)
    assert published(remote, str(tmp_path)) == new
    assert all(not k.startswith("part") for k in remote.objects())


def test_a_local_and_remote_out(remote: Remote, tmp_path: Any, meddling: Any) -> None:
    """``(local, remote)``: the remote index first, then the same bytes in ``local`` (not
    with ``keep_local=False``); a refused remote write leaves no local copy either."""
    for k in range(2):
        write(part(remote, k), tagged(k))
    urls = [f"{remote.url}/part{k}/index.json" for k in range(2)]
    kept, dropped, lost = (str(tmp_path / n) for n in ("kept", "dropped", "lost"))
    merge_index(urls, (kept, remote.url))
    with open(os.path.join(kept, "index.json"), "rb") as f:
        assert f.read() == index_bytes(remote)
    merge_index(urls, (dropped, remote.url), keep_local=False)
    assert not os.path.exists(os.path.join(dropped, "index.json"))
    assert published(remote, str(tmp_path)) == tagged(0) + tagged(1)
    meddling(lambda: merge_index(urls[:1], remote.url))
    with pytest.raises(ObjectChangedError):
        merge_index(urls, (lost, remote.url))
    assert not os.path.exists(os.path.join(lost, "index.json"))
    assert published(remote, str(tmp_path)) == tagged(0)


def test_download_timeout_bounds_each_remote_read(
    s3_bucket: str, s3_server: Any, make_proxy: Any, monkeypatch: pytest.MonkeyPatch,
    tmp_path: Any,
) -> None:  # fmt: skip
    """Each sub-index request may take ``download_timeout`` seconds: behind a proxy that
    answers after 1 s, 0.2 s fails the merge (a timeout, after the retries) before anything is
    written; 30 s merges."""
    remote = Remote("s3", f"{s3_bucket}/timeout-{os.urandom(4).hex()}")
    for k in range(2):
        write(part(remote, k), tagged(k))
    proxy = make_proxy(s3_server.url, latency=1.0)
    monkeypatch.setenv("S3_ENDPOINT_URL", proxy.url)
    urls = [f"{remote.url}/part{k}/index.json" for k in range(2)]
    t0 = time.monotonic()
    with pytest.raises(StorageTimeoutError) as err:
        merge_index(urls, remote.url, True, 0.2)
    assert time.monotonic() - t0 < 5 * 1.0  # five 0.2 s tries and their backoff, not 1 s each
    assert "part0/index.json" in str(err.value)
    monkeypatch.setenv("S3_ENDPOINT_URL", s3_server.url)
    assert "index.json" not in remote.objects()
    monkeypatch.setenv("S3_ENDPOINT_URL", proxy.url)
    merge_index(urls, remote.url, download_timeout=30)
    monkeypatch.setenv("S3_ENDPOINT_URL", s3_server.url)
    assert published(remote, str(tmp_path)) == tagged(0) + tagged(1)


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((["a/index.json"], "o"), {"download_timeout": 0}, "download_timeout must be"),
        (("o",), {"download_timeout": -1.0}, "download_timeout must be"),
        (("o", True, True), {}, r"download_timeout must be .*got True"),
        (("o",), {"download_timeout": "60"}, r"download_timeout must be .*got '60'"),
        (("o",), {"download_timeout": 10**9}, "download_timeout must be"),
        ((["a/index.json"], "o", True, 60, "x"), {}, "at most 4 positional arguments"),
        (("o", True, 60, "x"), {}, "at most 3 positional arguments"),
        (("o",), {"index_fil_urls": []}, "'index_fil_urls' is not an argument"),
        (("o", True), {"keep_local": False}, "'keep_local' given twice"),
    ],
)
def test_bad_arguments_are_refused_by_name(
    args: tuple[Any, ...], kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        merge_index(*args, **kwargs)
