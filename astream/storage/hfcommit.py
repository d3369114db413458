"""One Hub commit holding many files: the write path of ``hf://`` stores.

Theory of operation
-------------------
A commit is made the way the Hub's own client makes it:

1. ``POST {endpoint}/api/datasets/{repo}/preupload/{branch}`` with each file's path, size and
   first 512 bytes (base64): the Hub answers ``regular`` or ``lfs`` per file.
2. For the LFS files, ``POST {endpoint}/datasets/{repo}.git/info/lfs/objects/batch``
   (``operation: upload``, sha256 and size of each): an object the Hub already stores comes back
   without actions and is not sent again; the others are ``PUT`` whole to the ``href`` of their
   ``upload`` action (with that action's headers only, never the token: the URL is presigned),
   then confirmed at their ``verify`` action. Multipart LFS transfers (an upload action with a
   ``chunk_size``) and Xet transfers are not implemented: such an answer is a clear error.
3. ``POST {endpoint}/api/datasets/{repo}/commit/{branch}``, an NDJSON body: a ``header`` line
   (summary, description and, when given, ``parentCommit``), one ``file`` line per regular file
   (its bytes base64), one ``lfsFile`` line per LFS file (path, sha256 oid, size) and one
   ``deletedFile`` line per deletion. With ``parentCommit`` the Hub refuses the commit (412)
   when the branch moved since: an :class:`~astream.errors.ObjectChangedError`.

Steps 1 and 2 are idempotent and retried on transient faults (429 honouring ``Retry-After``,
5xx, resets) within the retry policy; the commit itself is retried only when the Hub *answered*
429 or 5xx (it made no commit then), never after a connection lost mid-request, where a second
commit could follow the first. Its answer's ``commitOid`` becomes the store's pinned commit.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from astream.errors import (
    ConfigError,
    ObjectChangedError,
    StorageError,
    TransientStorageError,
)
from astream.storage.common import error_for_status
from astream.storage.retry import RetryPolicy

__all__ = ["Addition", "commit", "retry_after"]

SAMPLE = 512
PREUPLOAD_CHUNK = 256
LFS_CONCURRENCY = 8
_LFS_HEADERS = {
    "Accept": "application/vnd.git-lfs+json",
    "Content-Type": "application/vnd.git-lfs+json",
}
T = TypeVar("T")
HfBackend = Any  # astream.storage.hf.HfBackend, which imports this module


def retry_after(value: str | None) -> float | None:
    """Seconds a ``Retry-After`` header asks for (delta-seconds only), or None."""
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None


@dataclass(frozen=True)
class Addition:
    """A file to add: its path in the repository and its bytes (in memory or in a file)."""

    path: str
    size: int
    sha256: str
    sample: bytes
    local: str | None = None
    data: bytes | None = None

    @classmethod
    def of_bytes(cls, path: str, data: bytes) -> Addition:
        return cls(path, len(data), hashlib.sha256(data).hexdigest(), data[:SAMPLE], data=data)

    @classmethod
    def of_file(cls, path: str, local: str) -> Addition:
        h = hashlib.sha256()
        with open(local, "rb") as f:
            sample = f.read(SAMPLE)
            h.update(sample)
            while chunk := f.read(1 << 20):
                h.update(chunk)
        return cls(path, os.path.getsize(local), h.hexdigest(), sample, local=local)

    def read(self) -> bytes:
        if self.data is not None:
            return self.data
        assert self.local is not None
        with open(self.local, "rb") as f:
            return f.read()


class _Answer:
    def __init__(self, status: int, headers: Any, body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body

    def json(self, url: str) -> Any:
        try:
            return json.loads(self.body)
        except ValueError:
            raise StorageError(
                f"the Hub's answer is not JSON: {self.body[:200]!r}", url, retryable=False
            ) from None


async def _send(
    store: HfBackend, method: str, url: str, headers: dict[str, str], body: Any
) -> _Answer:
    """One request by aiohttp (h1 sends no bodies); the token only to the endpoint."""
    import aiohttp

    session = await store.session()
    sent = dict(headers)
    if url.startswith(store.endpoint + "/"):
        sent.update(store.auth_headers())
    try:
        async with session.request(method, url, data=body, headers=sent) as resp:
            data = await resp.read()
            return _Answer(resp.status, resp.headers, data)
    except (aiohttp.ClientError, OSError) as exc:
        raise TransientStorageError(
            f"connection failed ({type(exc).__name__}: {exc})", url
        ) from exc


def _check(ans: _Answer, url: str) -> None:
    if ans.status < 300:
        return
    detail = ans.headers.get("X-Error-Message") or ans.body[:200].decode("utf-8", "replace")
    err = error_for_status(ans.status, url, detail)
    err.retry_after = retry_after(ans.headers.get("Retry-After"))  # type: ignore[attr-defined]
    raise err


async def _retried(
    policy: RetryPolicy, step: Callable[[], Awaitable[T]], answered: bool = False
) -> T:
    """``step`` again after a transient fault (waiting at least ``Retry-After``); with
    ``answered``, only after faults the Hub answered (429, 5xx), not lost connections."""
    rng = random.Random()
    loop = asyncio.get_running_loop()
    end = None if policy.deadline is None else loop.time() + policy.deadline
    for failures in range(1, policy.attempts + 1):
        try:
            return await step()
        except TransientStorageError as exc:
            lost = str(exc._message).startswith("connection failed")
            if failures >= policy.attempts or (answered and lost):
                raise
            delay = max(policy.backoff(failures, rng), getattr(exc, "retry_after", None) or 0.0)
            if end is not None and loop.time() + delay >= end:
                raise
            await asyncio.sleep(delay)
    raise AssertionError("unreachable")


async def _preupload(store: HfBackend, files: list[Addition], policy: RetryPolicy) -> set[str]:
    """The paths the Hub wants as LFS objects."""
    url = store.api("preupload", store.revision)
    lfs: set[str] = set()
    for i in range(0, len(files), PREUPLOAD_CHUNK):
        payload = {
            "files": [
                {
                    "path": a.path,
                    "sample": base64.b64encode(a.sample).decode("ascii"),
                    "size": a.size,
                }
                for a in files[i : i + PREUPLOAD_CHUNK]
            ]
        }
        body = json.dumps(payload).encode()

        async def go(body: bytes = body) -> _Answer:
            ans = await _send(store, "POST", url, {"Content-Type": "application/json"}, body)
            _check(ans, url)
            return ans

        ans = await _retried(policy, go)
        for f in ans.json(url).get("files", []):
            if f.get("uploadMode") == "lfs":
                lfs.add(f["path"])
    return lfs


async def _upload_lfs(
    store: HfBackend, files: list[Addition], policy: RetryPolicy, concurrency: int
) -> None:
    """Send the LFS objects the Hub does not hold yet (batch API, basic transfer)."""
    if not files:
        return
    url = f"{store.endpoint}/datasets/{store.repo}.git/info/lfs/objects/batch"
    payload = {
        "operation": "upload",
        "transfers": ["basic"],
        "objects": [{"oid": a.sha256, "size": a.size} for a in files],
        "hash_algo": "sha256",
        "ref": {"name": store.revision},
    }

    async def batch() -> _Answer:
        ans = await _send(store, "POST", url, dict(_LFS_HEADERS), json.dumps(payload).encode())
        _check(ans, url)
        return ans

    answer = (await _retried(policy, batch)).json(url)
    by_oid = {a.sha256: a for a in files}
    sem = asyncio.Semaphore(concurrency)

    async def one(obj: dict[str, Any]) -> None:
        if obj.get("error"):
            raise StorageError(
                f"the Hub refused LFS object {obj.get('oid')}: {obj['error']}", url, retryable=False
            )
        actions = obj.get("actions") or {}
        if "upload" not in actions:
            return  # the Hub has it already
        add = by_oid[obj["oid"]]
        async with sem:
            await _put_object(store, add, actions["upload"], actions.get("verify"), policy)

    await asyncio.gather(*(one(o) for o in answer.get("objects", [])))


async def _put_object(
    store: HfBackend,
    add: Addition,
    upload: dict[str, Any],
    verify: dict[str, Any] | None,
    policy: RetryPolicy,
) -> None:
    header = {str(k): str(v) for k, v in (upload.get("header") or {}).items()}
    if "chunk_size" in header:
        raise StorageError(
            f"{add.path}: the Hub asked for a multipart LFS upload, which astream does not "
            "implement (basic transfers only)",
            upload.get("href"),
            retryable=False,
        )
    href = upload["href"]

    async def put() -> None:
        if add.local is None:
            ans = await _send(store, "PUT", href, header, add.read())
        else:
            with open(add.local, "rb") as f:  # streamed from the file, not read whole
                ans = await _send(store, "PUT", href, header, f)
        _check(ans, href)

    await _retried(policy, put)
    if verify is not None:
        vurl = verify["href"]
        vhead = {str(k): str(v) for k, v in (verify.get("header") or {}).items()}
        vbody = json.dumps({"oid": add.sha256, "size": add.size}).encode()

        async def check() -> None:
            ans = await _send(store, "POST", vurl, {**_LFS_HEADERS, **vhead}, vbody)
            _check(ans, vurl)

        await _retried(policy, check)


def _ndjson(lines: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(x).encode() + b"\n" for x in lines)


async def commit(
    store: HfBackend,
    additions: list[Addition],
    deletions: list[str],
    message: str,
    *,
    parent: str | None = None,
    policy: RetryPolicy | None = None,
    concurrency: int = LFS_CONCURRENCY,
) -> str:
    """Make one commit on ``store``'s branch adding ``additions`` and deleting ``deletions``
    (paths in the repository); with ``parent``, only while the branch is still at that commit;
    at most ``concurrency`` LFS uploads at once.
    Return the new commit's sha, which ``store`` reads from then on."""
    if len(store.revision) == 40 and all(c in "0123456789abcdef" for c in store.revision):
        raise ConfigError(f"{store.url}: a commit sha is not a branch; name the branch to write")
    policy = policy or RetryPolicy()
    lfs_paths = await _preupload(store, additions, policy) if additions else set()
    lfs = [a for a in additions if a.path in lfs_paths]
    await _upload_lfs(store, lfs, policy, concurrency)
    header: dict[str, Any] = {"summary": message, "description": ""}
    if parent is not None:
        header["parentCommit"] = parent
    lines: list[dict[str, Any]] = [{"key": "header", "value": header}]
    for a in additions:
        if a.path in lfs_paths:
            value = {"path": a.path, "algo": "sha256", "oid": a.sha256, "size": a.size}
            lines.append({"key": "lfsFile", "value": value})
        else:
            content = base64.b64encode(a.read()).decode("ascii")
            lines.append(
                {"key": "file", "value": {"content": content, "path": a.path, "encoding": "base64"}}
            )
    lines += [{"key": "deletedFile", "value": {"path": p}} for p in deletions]
    url = store.api("commit", store.revision)
    body = _ndjson(lines)

    async def post() -> _Answer:
        ans = await _send(store, "POST", url, {"Content-Type": "application/x-ndjson"}, body)
        if ans.status == 412:
            raise ObjectChangedError(
                f"the branch {store.revision!r} moved since commit {parent} (another push); "
                "the commit was refused",
                store.url,
            )
        _check(ans, url)
        return ans

    sha = (await _retried(policy, post, answered=True)).json(url).get("commitOid")
    if not isinstance(sha, str) or len(sha) != 40:
        raise StorageError("the Hub's commit answer names no commitOid", url, retryable=False)
    store.moved_to(sha)
    return sha
