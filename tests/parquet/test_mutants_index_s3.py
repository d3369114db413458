"""The Parquet index builder over S3 (moto, behind a counting proxy where requests matter).

- The published index is read conditionally on the identity its HEAD gave: republished
  between the HEAD and the GET, the load is an ObjectChangedError.
- A cold listing reads footers while it lists: only of the split's files; with
  ``use_published=False`` from the first page on; keys listed before where a published index
  would be are held until the listing passes that point, then read at once.
- A warm listing is cut into ranges of ``page - 2`` cached keys (at least one): the request
  count for each page size; a store with no parquet objects, a refused or timed-out listing
  name the root.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from astream.errors import EmptyDatasetError, ObjectChangedError
from astream.parquet.io_index import build_table, load_parquet
from astream.parquet.published import INDEX_NAME
from astream.parquet.table import ParquetTable
from astream.storage import open_store
from astream.storage.sync import upload, upload_key

from .test_mutants_index import NAMES, _build, _publish, _write


def test_published_index_rewritten_between_head_and_get(
    tmp_path: Any, s3_bucket: str, s3_server: Any, make_proxy: Any
) -> None:
    root = str(tmp_path / "t")
    _write(root, NAMES)
    url = f"{s3_bucket}/pub-{uuid.uuid4().hex[:8]}"
    upload(root, url)
    _publish(url)
    proxy = make_proxy(s3_server.url)
    gate = proxy.hold(lambda method, path, rng: method == "GET" and path.endswith(INDEX_NAME))

    async def go() -> None:
        store = open_store(url, endpoint_url=proxy.url)
        try:
            task = asyncio.ensure_future(
                load_parquet(
                    store,
                    str(tmp_path / "c"),
                    columns=None,
                    files=None,
                    split=None,
                    in_place=False,
                    published=True,
                )
            )
            while not proxy.stats.held:  # the HEAD is done, the GET waits at the proxy
                await asyncio.sleep(0.01)
            _write(root, ["x.parquet"])  # a republished index: other bytes, other ETag
            await asyncio.to_thread(upload_key, os.path.join(root, "x.parquet"), url, "x.parquet")
            await asyncio.to_thread(_publish, url)
            gate.set()
            with pytest.raises(ObjectChangedError) as e:
                await task
            assert INDEX_NAME in str(e.value)
        finally:
            await store.aclose()

    asyncio.run(go())


# --- the cold listing on S3 ------------------------------------------------------------------


def _s3(tmp_path: Any, s3_bucket: str, names: list[str]) -> str:
    root = str(tmp_path / "t")
    _write(root, names)
    url = f"{s3_bucket}/cold-{uuid.uuid4().hex[:8]}"
    upload(root, url)
    return url


def _release_on(proxy: Any, gate: threading.Event, wanted: Callable[[str], bool]) -> None:
    """From a thread: set ``gate`` once a GET whose path is ``wanted`` has reached ``proxy``,
    or after 10 s (code that never sends one then fails its test's order assertions)."""

    def watch() -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not any(
            wanted(p) for p, _ in list(proxy.stats.ranges)
        ):
            time.sleep(0.005)
        gate.set()

    threading.Thread(target=watch, daemon=True).start()


def test_cold_split_reads_only_the_splits_footers(
    tmp_path: Any, s3_bucket: str, reads: list[str]
) -> None:
    names = [f"train/{i}.parquet" for i in range(3)] + [f"test/{i}.parquet" for i in range(3)]
    url = _s3(tmp_path, s3_bucket, names)

    async def go() -> tuple[ParquetTable, int]:
        store = open_store(url, list_page_size=2)
        try:
            return await build_table(store, split="train")
        finally:
            await store.aclose()

    table, n = asyncio.run(go())
    assert [f.key for f in table.files] == names[:3] and n == 3
    assert sorted(reads) == names[:3]


def test_cold_without_published_reads_from_the_first_page(
    tmp_path: Any, s3_bucket: str, s3_server: Any, make_proxy: Any
) -> None:
    """Upper-case keys sort before the published index's name: without ``use_published``
    their footers are read while the later pages are listed, not after the listing."""
    names = [f"P{i}.parquet" for i in range(9)]
    url = _s3(tmp_path, s3_bucket, names)
    proxy = make_proxy(s3_server.url)
    lists = [0]

    def later_page(method: str, path: str, rng: str) -> bool:
        # every listing request after the first waits at the proxy until a footer read has
        # come in (at most 10 s): the race between the listing and the reads is decided
        if method != "GET" or path.endswith(".parquet"):
            return False
        lists[0] += 1
        return lists[0] > 1

    _release_on(proxy, proxy.hold(later_page), lambda path: path.endswith(".parquet"))

    async def go() -> tuple[ParquetTable, int]:
        store = open_store(url, endpoint_url=proxy.url, list_page_size=3)
        try:
            return await build_table(store, use_published=False)
        finally:
            await store.aclose()

    table, n = asyncio.run(go())
    assert [f.key for f in table.files] == names and n == 9
    assert len(proxy.stats.held) == 1  # the second page waited (the third came after it)
    order = [p.endswith(".parquet") for p, _ in proxy.stats.ranges]
    assert order.count(False) == 3 and order.count(True) == 9
    last_page = len(order) - 1 - order[::-1].index(False)
    assert order.index(True) < last_page


def test_cold_keys_before_the_index_name_are_read_once_it_is_passed(
    tmp_path: Any, s3_bucket: str, s3_server: Any, make_proxy: Any
) -> None:
    """Three upper-case keys (listed before where a published index would be), then twelve
    lower-case ones, pages of 3: with no index published, the held keys' footers are read as
    soon as the listing passes that point, pages before the listing ends."""
    held = [f"P{i}.parquet" for i in range(3)]
    names = held + [f"q{i:02d}.parquet" for i in range(12)]
    url = _s3(tmp_path, s3_bucket, names)
    proxy = make_proxy(s3_server.url)
    # the answer to the third page is held until P0's footer is asked for (10 s at most), so
    # the fourth page cannot be asked for before it: a busy machine can no longer list two
    # pages ahead of the footer task's first request (holding the fourth page's answer was
    # not enough: its request is counted before it is held), and code that read footers only
    # once the listing ended would wait out the 10 s and fail below
    lists = [0]

    def third_page(method: str, path: str, rng: str) -> bool:
        if path.endswith(".parquet"):
            return False
        lists[0] += 1
        return lists[0] == 3

    _release_on(proxy, proxy.hold(third_page), lambda path: path.endswith("/P0.parquet"))

    async def go() -> tuple[ParquetTable, int]:
        store = open_store(url, endpoint_url=proxy.url, list_page_size=3)
        try:
            return await build_table(store)
        finally:
            await store.aclose()

    table, n = asyncio.run(go())
    assert [f.key for f in table.files] == names and n == 15
    paths = [p for p, _ in proxy.stats.ranges]
    pages = [i for i, p in enumerate(paths) if not p.endswith(".parquet")]
    assert len(pages) == 5
    first_held = min(i for i, p in enumerate(paths) if p.endswith("/P0.parquet"))
    assert first_held < pages[-2]  # two or more pages before the end


@pytest.mark.parametrize("backend", ["local", "s3"])
@pytest.mark.parametrize("split", [None, "train"])
def test_no_parquet_objects_names_the_root(
    backend: str, split: str | None, tmp_path: Any, request: pytest.FixtureRequest
) -> None:
    root = str(tmp_path / "t")
    _write(root, ["notes.txt", "test/a.parquet"] if split else ["notes.txt"])
    url = root
    if backend == "s3":
        url = f"{request.getfixturevalue('s3_bucket')}/none-{uuid.uuid4().hex[:8]}"
        upload(root, url)
    store = open_store(url)
    with pytest.raises(EmptyDatasetError) as e:
        _build(url, split=split)
    where = store.url + (f" (split {split!r})" if split else "")
    assert str(e.value) == f"no *.parquet objects under {where}"


@pytest.mark.parametrize(
    ("page", "files", "lists"),
    [
        (5, 3, 1),  # as many cached keys as a range holds (page - 2): one serial listing
        (5, 4, 2),  # one more: cut at the 3rd key, two ranges
        (3, 4, 5),  # pages of 3: ranges of one cached key each
        (2, 3, 4),  # pages of 2: still at least one key a range
    ],
)
def test_warm_listing_ranges(
    page: int, files: int, lists: int, tmp_path: Any, s3_bucket: str, s3_server: Any,
    make_proxy: Any,
) -> None:  # fmt: skip
    names = [f"f{i}.parquet" for i in range(files)]
    url = _s3(tmp_path, s3_bucket, names)
    proxy = make_proxy(s3_server.url)

    async def go(cached: Any) -> tuple[ParquetTable, int]:
        store = open_store(url, endpoint_url=proxy.url, list_page_size=page)
        try:
            return await build_table(store, cached=cached)
        finally:
            await store.aclose()

    table, _ = asyncio.run(go(None))
    proxy.reset_stats()
    again, n = asyncio.run(go(table))
    assert n == 0 and [f.key for f in again.files] == names
    assert dict(proxy.stats.methods) == {"GET": lists}


@pytest.mark.parametrize("warm", [False, True])
def test_a_listing_that_times_out_names_the_root(
    warm: bool, tmp_path: Any, s3_bucket: str, s3_server: Any, make_proxy: Any
) -> None:
    """Cold: the listing that reads footers as it goes; warm: two cached keys, ranges of one
    (pages of 3), listed concurrently. A listing request with no answer in time names the
    root (the listing's prefix is the empty key)."""
    from astream.errors import StorageTimeoutError
    from astream.storage import RetryPolicy

    url = _s3(tmp_path, s3_bucket, ["a.parquet", "b.parquet"])
    proxy = make_proxy(s3_server.url)

    async def go(cached: Any, retry: Any = None) -> tuple[ParquetTable, int]:
        store = open_store(url, endpoint_url=proxy.url, list_page_size=3, retry=retry)
        try:
            return await build_table(store, cached=cached)
        finally:
            await store.aclose()

    table, _ = asyncio.run(go(None))
    proxy.configure(latency=2.0)
    with pytest.raises(StorageTimeoutError) as e:
        asyncio.run(go(table if warm else None, RetryPolicy(attempts=1, timeout=0.2)))
    assert str(e.value) == f"no response within 0.2s [{open_store(url).url_for('')}]"
