"""``hf://datasets/<org>/<repo>[@<revision>]/<path>``: Hugging Face Hub dataset repositories.

Theory of operation
-------------------
A store is rooted at a path inside one dataset repository at one revision. The revision
(``main`` when the URL names none) is *pinned*: on first use a branch or tag is resolved once to
its commit sha (``GET {endpoint}/api/datasets/{repo}/revision/{revision}``) and every later
request names that sha, so a push to the branch while a job trains cannot change its epoch. A
40-hex revision is a commit already and costs no request. The pin is process-wide (keyed by
endpoint, repository and revision) and is also written to the ``ASTREAM_HF_PINS`` environment
variable, because DataLoader workers open their own stores from the URL: a forked worker
inherits the table, a spawned one the environment, and both read the commit the parent read.
A store that commits (``put``, the dataset writer) moves the pin to its own new commit, so a
process sees what it wrote.

Revisions with a slash (``refs/convert/parquet``, ``refs/pr/3``) are written in the URL as they
are or percent-encoded (``@refs%2Fconvert%2Fparquet``), and sent percent-encoded as one path
segment, as the Hub expects.

Reads go out on astream's own HTTP/1.1 client (:mod:`astream.storage.h1`): a ranged GET of the
resolve endpoint (``{endpoint}/datasets/{repo}/resolve/{sha}/{path}``), following redirects to
the LFS/Xet CDN; the ``Authorization`` header is never sent to another origin than the
endpoint's. An object's identity is the Hub's ``X-Linked-Etag`` (the LFS sha256) or else its
``ETag`` (the git blob id), without quotes, the same value listing gives (``lfs.oid`` or
``oid``). Listing uses the tree API (recursive, paginated by the ``Link`` header); a prefix
whose directory does not exist lists nothing.

Credentials: the ``token=`` option, else ``HF_TOKEN``, else ``huggingface_hub.get_token()``
when that package is installed, else the token file (``$HF_HOME/token``,
``~/.cache/huggingface/token``). ``HF_ENDPOINT`` (or ``endpoint=``) names a mirror.

Errors map as for every backend: 401/403 -> :class:`AccessDeniedError`, 404 ->
:class:`ObjectNotFoundError`, 429 -> :class:`ThrottledError` carrying the ``Retry-After``
seconds, which the retry layer waits at least (within its deadline), 5xx -> transient.

Writes are commits (see :mod:`astream.storage.hfcommit`): ``put``/``put_file`` make one commit
each, ``delete`` one commit deleting the file; the dataset writers gather every file of a
dataset into one commit (:mod:`astream.writer.hfsink`). Conditional single-object writes
(``put_if``, ``put_file_if``, ``delete`` with ``expect``) are refused: a Hub dataset is
published as one commit conditioned on its parent commit instead.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote, unquote, urljoin, urlsplit

from astream.errors import ConfigError, ObjectNotFoundError, StorageError, ThrottledError
from astream.storage.base import ObjectInfo, Seen
from astream.storage.common import (
    POOL_SIZE,
    changed_error,
    check_content_range,
    error_for_status,
    join_key,
    range_header,
)
from astream.storage.h1 import Pool, Response
from astream.storage.hfcommit import Addition, commit, retry_after

__all__ = ["DEFAULT_ENDPOINT", "HfBackend", "hf_token", "parse_hf_url"]

DEFAULT_ENDPOINT = "https://huggingface.co"
PINS_ENV = "ASTREAM_HF_PINS"
MAX_REDIRECTS = 10
_REDIRECTS = (301, 302, 303, 307, 308)
_SHA = re.compile(r"[0-9a-f]{40}")
_LINK_NEXT = re.compile(r'<([^>]+)>\s*;\s*rel="?next"?')
_PATH_SAFE = "/%:@!$&'()*+,;=~-._"
_KEY_SAFE = "/:@!$&'()*+,;=~-._"
_PINS: dict[str, str] = {}


def parse_hf_url(url: str) -> tuple[str, str, str]:
    """``hf://datasets/org/repo@rev/a/b`` -> (``org/repo``, ``rev``, ``a/b``); ``main`` when
    no revision is given. ``refs/convert/<x>`` and ``refs/pr/<n>`` may be written unencoded."""
    if not url.startswith("hf://"):
        raise ConfigError(f"url {url!r}: not an hf:// URL")
    kind, _, rest = url[len("hf://") :].partition("/")
    if kind != "datasets":
        raise ConfigError(
            f"url {url!r}: only dataset repositories are supported "
            "(hf://datasets/<org>/<repo>[@<revision>]/<path>)"
        )
    parts = rest.split("/")
    if len(parts) < 2 or not parts[0] or not parts[1]:
        raise ConfigError(f"url {url!r}: expected hf://datasets/<org>/<repo>[@<revision>]/<path>")
    org, name, tail = parts[0], parts[1], parts[2:]
    revision = "main"
    if "@" in name:
        name, _, first = name.partition("@")
        if first == "refs" and len(tail) >= 2 and tail[0] in ("convert", "pr"):
            revision, tail = "/".join(["refs", *tail[:2]]), tail[2:]
        else:
            revision = unquote(first)
        if not name or not revision:
            raise ConfigError(f"url {url!r}: empty repository name or revision")
    path = "/".join(p for p in tail if p)
    if ".." in path.split("/"):
        raise ConfigError(f"url {url!r}: the path must not contain '..'")
    return f"{org}/{name}", revision, path


def hf_token() -> str | None:
    """The token of this machine's Hub login: ``HF_TOKEN``, then ``huggingface_hub``'s own
    lookup when installed, then the token file under ``HF_HOME``/``~/.cache/huggingface``."""
    token = os.environ.get("HF_TOKEN", "").strip()
    if token:
        return token
    try:
        import huggingface_hub
    except ImportError:
        huggingface_hub = None  # type: ignore[assignment]
    if huggingface_hub is not None:
        found = huggingface_hub.get_token()
        return found.strip() if found else None
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface"
    )
    for path in (os.environ.get("HF_TOKEN_PATH"), os.path.join(os.path.expanduser(home), "token")):
        if path and os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                text = f.read().strip()
            if text:
                return text
    return None


def identity(value: str | None) -> str | None:
    """An ETag as the Hub and its tree API name a file: no ``W/``, no quotes."""
    if not value:
        return None
    value = value.strip()
    if value.startswith("W/"):
        value = value[2:]
    return value.strip('"') or None


def _pin_key(endpoint: str, repo: str, revision: str) -> str:
    return f"{endpoint}|{repo}|{revision}"


def remember_pin(endpoint: str, repo: str, revision: str, sha: str) -> None:
    """Record ``revision`` -> ``sha`` for this process and the processes it starts."""
    key = _pin_key(endpoint, repo, revision)
    _PINS[key] = sha
    try:
        pins = json.loads(os.environ.get(PINS_ENV) or "{}")
    except ValueError:
        pins = {}
    pins[key] = sha
    os.environ[PINS_ENV] = json.dumps(pins, sort_keys=True)


def known_pin(endpoint: str, repo: str, revision: str) -> str | None:
    """The commit this process (or its parent) pinned ``revision`` to, if any."""
    key = _pin_key(endpoint, repo, revision)
    if key in _PINS:
        return _PINS[key]
    try:
        sha = json.loads(os.environ.get(PINS_ENV) or "{}").get(key)
    except (ValueError, AttributeError):
        return None
    if isinstance(sha, str) and _SHA.fullmatch(sha):
        _PINS[key] = sha
        return sha
    return None


def status_error(resp: Response, url: str) -> StorageError:
    """The astream error for a failed Hub answer (``Retry-After`` kept on a 429)."""
    detail = resp.reason
    code = resp.headers.get("X-Error-Code")
    message = resp.headers.get("X-Error-Message")
    if code:
        detail += f" ({code}{': ' + message if message else ''})"
    err = error_for_status(resp.status, url, detail)
    if isinstance(err, ThrottledError):
        err.retry_after = retry_after(resp.headers.get("Retry-After"))  # type: ignore[attr-defined]
    return err


class HfBackend:
    """The objects of one Hub dataset repository under one path, at one pinned commit."""

    def __init__(self, url: str, *, token: str | None = None, endpoint: str | None = None) -> None:
        if token is not None and (not isinstance(token, str) or not token.strip()):
            raise ConfigError("token must be a non-empty string (or None: the machine's login)")
        if endpoint is not None and not str(endpoint).startswith(("http://", "https://")):
            raise ConfigError(f"endpoint must be an http(s) URL, got {endpoint!r}")
        self.repo, self.revision, self.root = parse_hf_url(url)
        self.endpoint = (endpoint or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
        self._token = token.strip() if token is not None else None
        self._token_looked = token is not None
        self._sha = self.revision if _SHA.fullmatch(self.revision) else None
        self._pinning: asyncio.Future[str] | None = None
        self._pool = Pool(POOL_SIZE)
        self._session: Any = None  # an aiohttp session, for writes only (h1 sends no bodies)
        rev = "" if self.revision == "main" else "@" + quote(self.revision, safe="")
        self._url = f"hf://datasets/{self.repo}{rev}" + (f"/{self.root}" if self.root else "")

    # -- naming ---------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return self._url

    def url_for(self, key: str) -> str:
        return self._url if not key else f"{self._url}/{join_key('', key)}"

    def path_of(self, key: str) -> str:
        """The file's path inside the repository."""
        return join_key(self.root, key) if key else self.root

    def api(self, what: str, revision: str, tail: str = "") -> str:
        """``{endpoint}/api/datasets/{repo}/{what}/{revision}{tail}`` (revision encoded)."""
        return f"{self.endpoint}/api/datasets/{self.repo}/{what}/{quote(revision, safe='')}{tail}"

    def auth_headers(self) -> dict[str, str]:
        if not self._token_looked:
            self._token = hf_token()
            self._token_looked = True
        return {"Authorization": f"Bearer {self._token}"} if self._token else {}

    # -- the pinned revision --------------------------------------------------------------------

    async def commit_sha(self) -> str:
        """The commit this store reads: resolved once, then fixed (see the module doc)."""
        if self._sha is not None:
            return self._sha
        known = known_pin(self.endpoint, self.repo, self.revision)
        if known is not None:
            self._sha = known
            return known
        if self._pinning is None or (self._pinning.done() and self._pinning.exception()):
            self._pinning = asyncio.ensure_future(self._resolve())
        sha = await asyncio.shield(self._pinning)
        self._sha = sha
        return sha

    async def branch_head(self) -> str:
        """The commit ``revision`` names on the Hub now (one request, not pinned)."""
        url = self.api("revision", self.revision)
        resp = await self.request("GET", url, {})
        try:
            if resp.status >= 400:
                raise status_error(resp, self._url)
            body = await resp.read(1 << 20)
        finally:
            resp.release()
        try:
            sha = json.loads(body)["sha"]
        except (ValueError, KeyError, TypeError):
            sha = None
        if not isinstance(sha, str) or not _SHA.fullmatch(sha):
            raise StorageError(
                f"the Hub's revision answer names no commit sha: {body[:200]!r}",
                self._url,
                retryable=False,
            )
        return sha

    async def _resolve(self) -> str:
        sha = await self.branch_head()
        remember_pin(self.endpoint, self.repo, self.revision, sha)
        return sha

    def moved_to(self, sha: str) -> None:
        """This store made commit ``sha`` on its branch: read it from now on."""
        self._sha = sha
        remember_pin(self.endpoint, self.repo, self.revision, sha)

    # -- HTTP -----------------------------------------------------------------------------------

    async def request(
        self, method: str, url: str, headers: dict[str, str], first: list[Response] | None = None
    ) -> Response:
        """``method`` on ``url`` with the token, redirects followed; the token goes only to the
        endpoint's origin. ``first`` receives the first answer's headers' owner when it was a
        redirect (its ``X-Linked-*`` headers name the LFS object)."""
        origin = _origin(self.endpoint)
        target = url
        for _ in range(MAX_REDIRECTS + 1):
            parts = urlsplit(target)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise StorageError(f"redirected to {target!r}, not an http(s) URL", url)
            sent = dict(headers)
            if _origin(target) == origin:
                sent.update(self.auth_headers())
            path = quote(parts.path or "/", safe=_PATH_SAFE)
            if parts.query:
                path += "?" + quote(parts.query, safe=_PATH_SAFE + "?")
            resp = await self._pool.request(method, (parts.scheme, parts.netloc, path), sent, url)
            location = resp.headers.get("Location")
            if resp.status not in _REDIRECTS or not location:
                return resp
            resp.release()
            if first is not None and not first:
                first.append(resp)
            target = urljoin(target, location)
        raise StorageError(f"more than {MAX_REDIRECTS} redirects in a row", url, retryable=False)

    async def _resolve_url(self, key: str) -> str:
        sha = await self.commit_sha()
        path = quote(self.path_of(key), safe=_KEY_SAFE)
        return f"{self.endpoint}/datasets/{self.repo}/resolve/{sha}/{path}"

    # -- reads ----------------------------------------------------------------------------------

    async def iter_range(
        self, key: str, start: int, end: int | None, etag: str | None = None, seen: Seen = None
    ) -> AsyncIterator[bytes]:
        url = await self._resolve_url(key)
        rng = range_header(start, end)
        first: list[Response] = []
        resp = await self.request("GET", url, {"Range": rng} if rng else {}, first)
        try:
            if resp.status == 416:
                return
            if resp.status >= 400:
                raise status_error(resp, self.url_for(key))
            got = identity(_linked(first, resp, "X-Linked-Etag") or _linked(first, resp, "ETag"))
            if etag is not None and got is not None and got != identity(etag):
                raise changed_error(self.url_for(key), etag)
            if rng is not None and resp.status == 200:
                whole = resp.content_length
                if not (start == 0 and whole is not None and end is not None and whole <= end):
                    raise StorageError(
                        f"the Hub ignored the Range header ({rng}) and sent the whole file",
                        self.url_for(key),
                        retryable=False,
                    )
            if resp.status == 206 and rng is not None:
                check_content_range(resp.headers.get("Content-Range"), rng, start, end, url)
            if seen is not None and got:
                seen.append(got)
            async for chunk in resp.chunks():
                yield chunk
        finally:
            resp.release()

    async def get_tail(self, key: str, n: int) -> tuple[ObjectInfo, bytes]:
        """The last ``n`` bytes of ``key`` with its size and identity, in one suffix-range GET
        (a Parquet footer: no HEAD first)."""
        url = await self._resolve_url(key)
        first: list[Response] = []
        resp = await self.request("GET", url, {"Range": f"bytes=-{n}"}, first)
        try:
            if resp.status == 416:
                data, total = b"", "0"
            elif resp.status >= 400:
                raise status_error(resp, self.url_for(key))
            else:
                data = await resp.read()
                cr = resp.headers.get("Content-Range") if resp.status == 206 else None
                total = (cr or "").rpartition("/")[2].strip() or str(len(data))
        finally:
            resp.release()
        if not total.isdigit():
            raise StorageError(f"Content-Range without a size: {total!r}", self.url_for(key))
        tag = identity(_linked(first, resp, "X-Linked-Etag") or _linked(first, resp, "ETag"))
        return ObjectInfo(key, int(total), tag), data[-n:] if n else b""

    async def head(self, key: str) -> ObjectInfo:
        url = await self._resolve_url(key)
        first: list[Response] = []
        resp = await self.request("HEAD", url, {}, first)
        resp.release()
        if resp.status >= 400:
            raise status_error(resp, self.url_for(key))
        linked = _linked(first, resp, "X-Linked-Size")
        size = int(linked) if linked and linked.isdigit() else resp.content_length
        if size is None:
            raise StorageError("the Hub's answer has no size", self.url_for(key))
        tag = identity(_linked(first, resp, "X-Linked-Etag") or _linked(first, resp, "ETag"))
        return ObjectInfo(key, size, tag)

    async def list_page(
        self, prefix: str, token: str | None
    ) -> tuple[list[ObjectInfo], str | None]:
        if token is None:
            sha = await self.commit_sha()
            folder = self.path_of(prefix).rpartition("/")[0] if "/" in self.path_of(prefix) else ""
            if not prefix:
                folder = self.root
            tail = "/" + quote(folder, safe="") if folder else ""
            url = self.api("tree", sha, tail) + "?recursive=true&expand=false"
        else:
            url = token
        resp = await self.request("GET", url, {})
        try:
            if resp.status == 404 and resp.headers.get("X-Error-Code") == "EntryNotFound":
                return [], None  # no such directory: nothing under the prefix
            if resp.status >= 400:
                raise status_error(resp, self.url_for(prefix))
            body = await resp.read()
            nxt = _next_link(resp.headers.get("Link"), url, self.endpoint)
        finally:
            resp.release()
        return self._entries(body, prefix), nxt

    def _entries(self, body: bytes, prefix: str) -> list[ObjectInfo]:
        try:
            entries = json.loads(body)
            assert isinstance(entries, list)
        except (ValueError, AssertionError):
            raise StorageError(
                "the Hub's tree answer is not a JSON list", self.url, retryable=False
            ) from None
        out: list[ObjectInfo] = []
        base = self.root + "/" if self.root else ""
        for e in entries:
            if not isinstance(e, dict) or e.get("type") != "file":
                continue
            path = str(e.get("path", ""))
            if not path.startswith(base):
                continue
            key = path[len(base) :]
            if not key.startswith(prefix):
                continue
            lfs = e.get("lfs") if isinstance(e.get("lfs"), dict) else None
            oid = (lfs or {}).get("oid") or e.get("oid")
            out.append(ObjectInfo(key, int(e.get("size", 0)), identity(oid)))
        return out

    # -- writes ---------------------------------------------------------------------------------

    async def put(self, key: str, data: bytes) -> None:
        await commit(self, [Addition.of_bytes(self.path_of(key), data)], [], f"Upload {key}")

    async def put_file(self, key: str, path: str) -> None:
        await commit(self, [Addition.of_file(self.path_of(key), path)], [], f"Upload {key}")

    async def put_if(self, key: str, data: bytes, expect: str | None) -> str:
        raise self._no_conditional(key)

    async def put_file_if(self, key: str, path: str, expect: str | None) -> str:
        raise self._no_conditional(key)

    async def delete(self, key: str, expect: str | None) -> None:
        if expect is not None:
            raise self._no_conditional(key)
        try:
            await self.head(key)
        except ObjectNotFoundError:
            return
        await commit(self, [], [self.path_of(key)], f"Delete {key}")

    def _no_conditional(self, key: str) -> StorageError:
        return StorageError(
            "conditional single-file writes are not supported on hf:// (a dataset is "
            "published as one commit: MDSWriter or astream convert)",
            self.url_for(key),
            retryable=False,
        )

    async def session(self) -> Any:
        """The aiohttp session of this store's writes (created on first use)."""
        if self._session is None or self._session.closed:
            import aiohttp

            self._session = aiohttp.ClientSession(auto_decompress=False)
        return self._session

    async def aclose(self) -> None:
        await self._pool.aclose()
        session, self._session = self._session, None
        if session is not None:
            await session.close()


def _linked(first: list[Response], last: Response, name: str) -> str | None:
    """A header of the first (redirecting) answer, else of the final one."""
    if first:
        value = first[0].headers.get(name)
        if value is not None:
            return value
    return last.headers.get(name)


def _next_link(value: str | None, base: str, endpoint: str) -> str | None:
    """The next page's URL, on the endpoint's origin (a mirror or proxy may pass on the Hub's
    own absolute links; the next page must go where the token may go)."""
    if not value:
        return None
    m = _LINK_NEXT.search(value)
    if not m:
        return None
    nxt = urlsplit(urljoin(base, m.group(1)))
    home = urlsplit(endpoint)
    rebased: str = nxt._replace(scheme=home.scheme, netloc=home.netloc).geturl()
    return rebased


def _origin(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.scheme, parts.netloc.rpartition("@")[2].lower()
