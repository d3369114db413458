"""A small Hugging Face Hub on 127.0.0.1: the HTTP API astream's ``hf://`` backend speaks.

Two aiohttp apps run in private loop threads: the *Hub* and a *CDN* on another port (another
origin, as the Hub's LFS/Xet storage is). Repositories, branches and commits live in memory;
tests create them with :meth:`HubServer.create_repo` and :meth:`HubServer.push` (a commit made
on the server's side: "someone pushed").

Requests the Hub answers (``{repo}`` is ``org/name``, ``{rev}`` a branch, tag-like ref or sha,
percent-encoded as one segment when it holds a slash):

- ``GET /api/datasets/{repo}/revision/{rev}`` -> ``{"id", "sha", "siblings"}``.
- ``GET /api/datasets/{repo}/tree/{rev}[/{path}]?recursive=&expand=&cursor=`` -> a JSON list of
  ``{"type": "file"|"directory", "oid", "size", "path"[, "lfs": {"oid", "size",
  "pointerSize"}]}`` sorted by path, ``page_size`` entries a page, the next page named by a
  ``Link: <...>; rel="next"`` header. A path that is not a directory: 404 ``EntryNotFound``.
- ``GET``/``HEAD /datasets/{repo}/resolve/{rev}/{path}``: a regular file is answered here
  (``Range`` honoured: 206/416; ``ETag`` the git blob id, ``X-Repo-Commit``); an LFS file is a
  302 to the CDN with ``X-Linked-Etag`` (its sha256) and ``X-Linked-Size``.
- ``POST /api/datasets/{repo}/preupload/{rev}`` -> ``uploadMode`` ``lfs`` for files of at
  least ``lfs_threshold`` bytes, else ``regular``.
- ``POST /datasets/{repo}.git/info/lfs/objects/batch`` (basic transfer): upload and verify
  actions for objects the server does not hold, none for those it does.
- ``POST /datasets/{repo}.git/info/lfs/objects/verify``.
- ``POST /api/datasets/{repo}/commit/{rev}``: NDJSON ``header`` (``parentCommit`` checked:
  412 when the branch moved), ``file`` (base64), ``lfsFile`` (the object must have been
  uploaded), ``deletedFile``, ``deletedFolder`` -> ``{"commitOid", "commitUrl", ...}``.

The CDN answers ``GET``/``HEAD /lfs/{sha256}?sig=`` (``Range`` honoured) and
``PUT /upload/{sha256}?sig=`` (the body must hash to the oid). Its URLs are presigned: a
request that also carries ``Authorization`` is refused with 400, as a presigned S3 URL is.

Access: a ``gated`` repository needs ``Authorization: Bearer <token>`` with a token in
``tokens`` for every read (none: 401, another: 403); every write needs such a token.
:meth:`HubServer.throttle` makes the next requests to the Hub answer 429 with ``Retry-After``.
Every request is recorded in :attr:`HubServer.log` as ``(host, method, raw path, had
Authorization)``.

Limits: dataset repositories only; no multipart or Xet transfers, no pull requests, tags or
``expand=true`` metadata; commit shas are derived from the tree and parent, not git objects.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote

from aiohttp import web

from astream.testing.servers import ThreadedApp

__all__ = ["HubServer"]

_ZERO = "0" * 40


@dataclass
class _File:
    data: bytes
    lfs: bool

    @property
    def oid(self) -> str:
        return hashlib.sha1(b"blob %d\0" % len(self.data) + self.data).hexdigest()

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


@dataclass
class _Repo:
    gated: bool = False
    branches: dict[str, str] = field(default_factory=dict)
    commits: dict[str, dict[str, _File]] = field(default_factory=dict)


def _error(status: int, code: str, message: str, **headers: str) -> web.Response:
    return web.json_response(
        {"error": message},
        status=status,
        headers={"X-Error-Code": code, "X-Error-Message": message, **headers},
    )


def _ranged(request: web.Request, data: bytes, headers: dict[str, str]) -> web.StreamResponse:
    rng = request.headers.get("Range")
    body, status = data, 200
    if rng:
        start_s, _, end_s = rng.removeprefix("bytes=").partition("-")
        if not start_s:
            start, end = max(0, len(data) - int(end_s)), len(data) - 1
        else:
            start = int(start_s)
            end = min(int(end_s), len(data) - 1) if end_s else len(data) - 1
        if start >= len(data):
            return web.Response(status=416, headers={"Content-Range": f"bytes */{len(data)}"})
        body, status = data[start : end + 1], 206
        headers = {**headers, "Content-Range": f"bytes {start}-{end}/{len(data)}"}
    headers = {**headers, "Accept-Ranges": "bytes"}
    if request.method == "HEAD":
        return web.Response(status=status, headers={**headers, "Content-Length": str(len(body))})
    return web.Response(status=status, body=body, headers=headers)


class HubServer:
    """The Hub and its CDN on two loopback ports (see the module doc)."""

    def __init__(
        self,
        *,
        tokens: tuple[str, ...] = ("hf_test_token",),
        page_size: int = 3,
        lfs_threshold: int = 1024,
    ) -> None:
        self.tokens = set(tokens)
        self.page_size = page_size
        self.lfs_threshold = lfs_threshold
        self.repos: dict[str, _Repo] = {}
        self.objects: dict[str, bytes] = {}  # the CDN's LFS store, by sha256
        self.log: list[tuple[str, str, str, bool]] = []
        self._throttle: list[float] = []
        self._lock = threading.Lock()
        hub = web.Application(client_max_size=1 << 31)
        cdn = web.Application(client_max_size=1 << 31)
        hub.router.add_route("*", "/{tail:.*}", self._hub)
        cdn.router.add_route("*", "/{tail:.*}", self._cdn)
        self._hub_app, self._cdn_app = ThreadedApp(hub), ThreadedApp(cdn)

    @property
    def url(self) -> str:
        return self._hub_app.url

    @property
    def cdn_url(self) -> str:
        return self._cdn_app.url

    def start(self) -> HubServer:
        self._hub_app.start()
        self._cdn_app.start()
        return self

    def stop(self) -> None:
        self._hub_app.stop()
        self._cdn_app.stop()

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- test-side operations -----------------------------------------------------------------

    def create_repo(self, repo: str, *, gated: bool = False) -> str:
        """A new dataset repository whose ``main`` holds one empty commit; its sha."""
        with self._lock:
            r = self.repos[repo] = _Repo(gated=gated)
            sha = self._new_commit(r, _ZERO, {})
            r.branches["main"] = sha
            return sha

    def push(
        self,
        repo: str,
        files: dict[str, bytes],
        *,
        branch: str = "main",
        delete: tuple[str, ...] = (),
    ) -> str:
        """Commit ``files`` (and the deletions) on ``branch`` (created from ``main`` when new),
        as another client would; the new commit's sha."""
        with self._lock:
            r = self.repos[repo]
            parent = r.branches.get(branch) or r.branches["main"]
            tree = {p: f for p, f in r.commits[parent].items() if p not in delete}
            for path, data in files.items():
                tree[path] = _File(data, len(data) >= self.lfs_threshold)
                if tree[path].lfs:
                    self.objects[tree[path].sha256] = data
            sha = self._new_commit(r, parent, tree)
            r.branches[branch] = sha
            return sha

    def files(self, repo: str, revision: str = "main") -> dict[str, bytes]:
        """The files at ``revision`` (a branch or a sha)."""
        r = self.repos[repo]
        sha = r.branches.get(revision, revision)
        return {p: f.data for p, f in r.commits[sha].items()}

    def is_lfs(self, repo: str, path: str, revision: str = "main") -> bool:
        r = self.repos[repo]
        return r.commits[r.branches.get(revision, revision)][path].lfs

    def throttle(self, n: int, retry_after: float = 0.0) -> None:
        """The next ``n`` requests to the Hub answer 429 with ``Retry-After: retry_after``."""
        with self._lock:
            self._throttle.extend([retry_after] * n)

    def commits(self, repo: str) -> int:
        """How many commits ``repo`` holds (the empty first one included)."""
        return len(self.repos[repo].commits)

    @staticmethod
    def _new_commit(r: _Repo, parent: str, tree: dict[str, _File]) -> str:
        h = hashlib.sha1(parent.encode())
        for p in sorted(tree):
            h.update(f"{p}\0{tree[p].oid}\0".encode())
        h.update(str(len(r.commits)).encode())
        sha = h.hexdigest()
        r.commits[sha] = dict(tree)
        return sha

    # -- the Hub ------------------------------------------------------------------------------

    def _access(self, request: web.Request, r: _Repo, write: bool) -> web.Response | None:
        auth = request.headers.get("Authorization", "")
        if not (r.gated or write):
            return None
        if not auth.startswith("Bearer "):
            return _error(
                401, "GatedRepo" if r.gated else "Unauthorized", "authentication required"
            )
        if auth[len("Bearer ") :] not in self.tokens:
            return _error(403, "Forbidden", "this token has no access to the repository")
        return None

    async def _hub(self, request: web.Request) -> web.StreamResponse:
        raw = request.rel_url.raw_path
        self.log.append(("hub", request.method, raw, "Authorization" in request.headers))
        with self._lock:
            wait = self._throttle.pop(0) if self._throttle else None
        if wait is not None:
            return _error(429, "RateLimited", "too many requests", **{"Retry-After": f"{wait:g}"})
        seg = raw.lstrip("/").split("/")
        if seg[:2] == ["api", "datasets"] and len(seg) >= 6:
            return await self._api(
                request,
                f"{unquote(seg[2])}/{unquote(seg[3])}",
                seg[4],
                unquote(seg[5]),
                [unquote(s) for s in seg[6:]],
            )
        if seg[0] == "datasets" and len(seg) >= 4 and seg[3] == "resolve" and len(seg) >= 6:
            repo = f"{unquote(seg[1])}/{unquote(seg[2])}"
            return self._resolve(request, repo, unquote(seg[4]), unquote("/".join(seg[5:])))
        if seg[0] == "datasets" and len(seg) >= 7 and seg[2].endswith(".git"):
            repo = f"{unquote(seg[1])}/{unquote(seg[2])[:-4]}"
            return await self._lfs(request, repo, seg[-1])
        return _error(404, "NotFound", f"no route {request.method} {raw}")

    def _lookup(self, repo: str, rev: str) -> tuple[_Repo, str] | web.Response:
        r = self.repos.get(repo)
        if r is None:
            return _error(404, "RepoNotFound", f"repository {repo} not found")
        sha = r.branches.get(rev, rev)
        if sha not in r.commits:
            return _error(404, "RevisionNotFound", f"revision {rev} not found")
        return r, sha

    async def _api(
        self, request: web.Request, repo: str, what: str, rev: str, rest: list[str]
    ) -> web.StreamResponse:
        r = self.repos.get(repo)
        if r is None:
            return _error(404, "RepoNotFound", f"repository {repo} not found")
        denied = self._access(request, r, write=what in ("commit", "preupload"))
        if denied is not None:
            return denied
        if what == "commit" and request.method == "POST":
            return await self._commit(request, repo, r, rev)
        found = self._lookup(repo, rev)
        if isinstance(found, web.Response):
            return found
        sha = found[1]
        if what == "revision" and request.method == "GET":
            names = [{"rfilename": p} for p in sorted(r.commits[sha])]
            return web.json_response({"id": repo, "sha": sha, "siblings": names})
        if what == "tree" and request.method == "GET":
            return self._tree(request, r, sha, "/".join(rest))
        if what == "preupload" and request.method == "POST":
            files = (await request.json())["files"]
            tree = r.commits[sha]
            return web.json_response(
                {
                    "files": [
                        {
                            "path": f["path"],
                            "shouldIgnore": False,
                            "uploadMode": "lfs" if f["size"] >= self.lfs_threshold else "regular",
                            "oid": tree[f["path"]].oid if f["path"] in tree else None,
                        }
                        for f in files
                    ]
                }
            )
        return _error(404, "NotFound", f"no route {what}")

    def _tree(self, request: web.Request, r: _Repo, sha: str, path: str) -> web.StreamResponse:
        tree = r.commits[sha]
        base = path.strip("/") + "/" if path.strip("/") else ""
        recursive = request.query.get("recursive", "false").lower() in ("true", "1")
        dirs: set[str] = set()
        entries: list[dict[str, Any]] = []
        for p, f in tree.items():
            if not p.startswith(base):
                continue
            parts = p[len(base) :].split("/")
            for i in range(1, len(parts)):
                if recursive or i == 1:
                    dirs.add(base + "/".join(parts[:i]))
            if recursive or len(parts) == 1:
                e: dict[str, Any] = {"type": "file", "oid": f.oid, "size": len(f.data), "path": p}
                if f.lfs:
                    e["lfs"] = {"oid": f.sha256, "size": len(f.data), "pointerSize": 134}
                entries.append(e)
        if base and not entries and not dirs:
            return _error(404, "EntryNotFound", f"{path} does not exist on this revision")
        entries += [{"type": "directory", "oid": _ZERO, "size": 0, "path": d} for d in dirs]
        entries.sort(key=lambda e: e["path"])
        start = int(request.query.get("cursor", "0"))
        page = entries[start : start + self.page_size]
        headers = {}
        if start + self.page_size < len(entries):
            query = dict(request.query)
            query["cursor"] = str(start + self.page_size)
            qs = "&".join(f"{k}={quote(v, safe='')}" for k, v in query.items())
            headers["Link"] = f'<{self.url}{request.rel_url.raw_path}?{qs}>; rel="next"'
        return web.json_response(page, headers=headers)

    def _resolve(self, request: web.Request, repo: str, rev: str, path: str) -> web.StreamResponse:
        found = self._lookup(repo, rev)
        if isinstance(found, web.Response):
            return found
        r, sha = found
        denied = self._access(request, r, write=False)
        if denied is not None:
            return denied
        f = r.commits[sha].get(path)
        if f is None:
            return _error(404, "EntryNotFound", f"{path} does not exist on {rev}")
        headers = {"ETag": f'"{f.oid}"', "X-Repo-Commit": sha}
        if f.lfs:
            headers.update(
                {
                    "X-Linked-Etag": f'"{f.sha256}"',
                    "X-Linked-Size": str(len(f.data)),
                    "Location": f"{self.cdn_url}/lfs/{f.sha256}?sig={_sig(f.sha256)}",
                }
            )
            return web.Response(status=302, headers=headers)
        return _ranged(request, f.data, headers)

    async def _commit(self, request: web.Request, repo: str, r: _Repo, branch: str) -> web.Response:
        lines = [json.loads(x) for x in (await request.read()).splitlines() if x.strip()]
        if not lines or lines[0].get("key") != "header":
            return _error(400, "BadRequest", "the first line must be the header")
        with self._lock:
            head = r.branches.get(branch)
            if head is None:
                return _error(404, "RevisionNotFound", f"branch {branch} not found")
            parent = lines[0]["value"].get("parentCommit")
            if parent is not None and parent != head:
                return _error(412, "PreconditionFailed", "A commit has happened since.")
            tree = dict(r.commits[head])
            for line in lines[1:]:
                key, v = line["key"], line["value"]
                if key == "file":
                    data = base64.b64decode(v["content"])
                    tree[v["path"]] = _File(data, False)
                elif key == "lfsFile":
                    data = self.objects.get(v["oid"], b"")
                    if v["oid"] not in self.objects or len(data) != v["size"]:
                        return _error(422, "LfsNotFound", f"LFS object {v['oid']} not uploaded")
                    tree[v["path"]] = _File(data, True)
                elif key == "deletedFile":
                    if tree.pop(v["path"], None) is None:
                        return _error(404, "EntryNotFound", f"{v['path']} does not exist")
                elif key == "deletedFolder":
                    base = v["path"].rstrip("/") + "/"
                    tree = {p: f for p, f in tree.items() if not p.startswith(base)}
                else:
                    return _error(400, "BadRequest", f"unknown line key {key!r}")
            sha = self._new_commit(r, head, tree)
            r.branches[branch] = sha
        return web.json_response(
            {
                "success": True,
                "commitOid": sha,
                "hookOutput": "",
                "commitUrl": f"{self.url}/datasets/{repo}/commit/{sha}",
            }
        )

    async def _lfs(self, request: web.Request, repo: str, op: str) -> web.Response:
        r = self.repos.get(repo)
        if r is None:
            return _error(404, "RepoNotFound", f"repository {repo} not found")
        denied = self._access(request, r, write=True)
        if denied is not None:
            return denied
        body = await request.json()
        if op == "verify":
            ok = len(self.objects.get(body["oid"], b"")) == body["size"] and (
                body["oid"] in self.objects
            )
            return web.json_response({}) if ok else _error(404, "LfsNotFound", "not uploaded")
        if op != "batch" or body.get("operation") != "upload":
            return _error(400, "BadRequest", "only the upload batch is served")
        out = []
        for o in body["objects"]:
            entry: dict[str, Any] = {"oid": o["oid"], "size": o["size"], "authenticated": True}
            if o["oid"] not in self.objects:
                entry["actions"] = {
                    "upload": {
                        "href": f"{self.cdn_url}/upload/{o['oid']}?sig={_sig(o['oid'])}",
                        "header": {},
                    },
                    "verify": {
                        "href": f"{self.url}/datasets/{repo}.git/info/lfs/objects/verify",
                        "header": {},
                    },
                }
            out.append(entry)
        return web.json_response(
            {"transfer": "basic", "objects": out}, content_type="application/vnd.git-lfs+json"
        )

    # -- the CDN ------------------------------------------------------------------------------

    async def _cdn(self, request: web.Request) -> web.StreamResponse:
        raw = request.rel_url.raw_path
        self.log.append(("cdn", request.method, raw, "Authorization" in request.headers))
        if "Authorization" in request.headers:
            return _error(400, "InvalidArgument", "only one auth mechanism allowed")
        seg = raw.lstrip("/").split("/")
        if len(seg) != 2 or request.query.get("sig") != _sig(seg[1]):
            return _error(403, "AccessDenied", "bad or missing signature")
        if seg[0] == "lfs" and request.method in ("GET", "HEAD"):
            data = self.objects.get(seg[1])
            if data is None:
                return _error(404, "NoSuchKey", "no such object")
            return _ranged(request, data, {"ETag": f'"{hashlib.md5(data).hexdigest()}"'})
        if seg[0] == "upload" and request.method == "PUT":
            data = await request.read()
            if hashlib.sha256(data).hexdigest() != seg[1]:
                return _error(400, "BadDigest", "the body does not hash to the oid")
            self.objects[seg[1]] = data
            return web.Response(status=200)
        return _error(404, "NotFound", "no such CDN route")


def _sig(oid: str) -> str:
    return hashlib.sha256(b"astream-test-cdn" + oid.encode()).hexdigest()[:16]
