"""Targets for the storage contract suite: one store URL + options per backend, proxy-able."""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest

from astream.storage import ObjectStore, RetryPolicy, open_store
from astream.testing import AzuriteServer, FaultProxy, Server

FAST = RetryPolicy(attempts=5, timeout=10.0, backoff_base=0.001, backoff_max=0.01)
BACKENDS = ["local", "http", "s3", "s3-sdk", "gcs", "azure"]
# the reference's other remotes: Databricks (test server), ADLS Gen2 through Azurite's blob
# endpoint, OCI's S3-compatible endpoint (moto), SFTP (asyncssh's server)
BACKENDS += ["dbfs-volumes", "dbfs", "adls", "oci", "sftp"]
# "s3" reads by astream's own signed requests (static keys in the environment); "s3-sdk" sends
# every request through aiobotocore (``direct=False``), as a store with other credentials does
CLOUD = ["s3", "s3-sdk", "gcs", "azure"]


@dataclass
class Target:
    """A fresh, empty root on one backend."""

    name: str
    url: str
    options: dict[str, Any]
    upstream: str | None = None  # the emulator's http://127.0.0.1:PORT, for proxying
    server: Server | None = None
    write_url: str | None = None  # where to seed objects when the store is read-only (http)
    extra: dict[str, Any] = field(default_factory=dict)

    def open(
        self, retry: RetryPolicy | None = FAST, proxy: FaultProxy | None = None
    ) -> ObjectStore:
        url, options = self.url, dict(self.options)
        if proxy is not None:
            if self.name == "http":
                assert self.upstream is not None
                url = proxy.url + self.url[len(self.upstream) :]
            elif self.name in ("s3", "s3-sdk"):
                options["endpoint_url"] = proxy.url
            elif self.name == "gcs":
                options["api_root"] = proxy.url
            elif self.name == "hf":
                options["endpoint"] = proxy.url
            elif self.name in ("dbfs-volumes", "dbfs"):
                options["host"] = proxy.url
            elif self.name == "adls":
                options["endpoint"] = f"{proxy.url}/devstoreaccount1"
            elif self.name == "oci":
                options["endpoint_url"] = proxy.url
            elif self.name == "azure":
                assert isinstance(self.server, AzuriteServer)
                options["connection_string"] = self.server.connection_string(
                    f"{proxy.url}/devstoreaccount1"
                )
        return open_store(url, retry=retry, **options)

    def writer(self) -> ObjectStore:
        """A store that can create objects visible to :meth:`open` (for http: its root dir)."""
        if self.write_url is not None:
            return open_store(self.write_url, retry=FAST)
        return self.open()


def make_target(name: str, request: pytest.FixtureRequest, tmp_path: Any, **sizes: Any) -> Target:
    prefix = f"p-{uuid.uuid4().hex[:10]}"
    if name == "local":
        return Target(name, str(tmp_path / "store"), {})
    if name == "http":
        root: str = request.getfixturevalue("http_root")
        server = request.getfixturevalue("http_server")
        os.makedirs(os.path.join(root, prefix), exist_ok=True)
        return Target(
            name,
            f"{server.url}/{prefix}",
            {},
            upstream=server.url,
            write_url=os.path.join(root, prefix),
        )
    if name in ("s3", "s3-sdk"):
        bucket = request.getfixturevalue("s3_bucket")
        srv = request.getfixturevalue("s3_server")
        opts = {**srv.store_options(), "list_page_size": 2, **sizes.get("s3", {})}
        opts["direct"] = name == "s3"  # direct=True fails loudly if it could not be direct
        return Target(name, f"{bucket}/{prefix}", opts, upstream=srv.url, server=srv)
    if name == "gcs":
        bucket = request.getfixturevalue("gcs_bucket")
        srv = request.getfixturevalue("gcs_server")
        opts = {**srv.store_options(), "list_page_size": 2, **sizes.get("gcs", {})}
        return Target(name, f"{bucket}/{prefix}", opts, upstream=srv.url, server=srv)
    if name == "azure":
        container = request.getfixturevalue("azure_container")
        srv = request.getfixturevalue("azure_server")
        opts = {**srv.store_options(), "list_page_size": 2, **sizes.get("azure", {})}
        return Target(name, f"{container}/{prefix}", opts, upstream=srv.url, server=srv)
    if name == "hf":  # a gated Hub dataset repository, rooted at a path inside it
        hub = request.getfixturevalue("hf_hub")
        repo = f"org/{prefix}"
        hub.create_repo(repo, gated=True)
        opts = {"endpoint": hub.url, "token": HUB_TOKEN}
        url = f"hf://datasets/{repo}/data"
        return Target(name, url, opts, upstream=hub.url, extra={"hub": hub})
    if name in ("dbfs-volumes", "dbfs", "adls", "oci", "sftp"):
        from .remotes import make_remote_target

        return make_remote_target(name, request, prefix)
    raise AssertionError(name)


HUB_TOKEN = "hf_test_token"


@pytest.fixture(scope="session")
def hf_hub() -> Any:
    """The test Hub (astream.testing.hub), LFS from 1 KiB, tree pages of 3 entries."""
    from astream.testing.hub import HubServer

    hub = HubServer(tokens=(HUB_TOKEN,), page_size=3, lfs_threshold=1024).start()
    yield hub
    hub.stop()


SMALL_PARTS = {
    "s3": {"multipart_threshold": 5 << 20, "part_size": 5 << 20},
    "gcs": {"resumable_threshold": 1 << 20},
    "azure": {"max_single_put_size": 1 << 20, "max_block_size": 1 << 20},
}


@pytest.fixture(params=BACKENDS)
def target(request: pytest.FixtureRequest, tmp_path: Any) -> Target:
    return make_target(request.param, request, tmp_path, **SMALL_PARTS)


@pytest.fixture(params=[b for b in BACKENDS if b != "http"])
def rooted_target(request: pytest.FixtureRequest, tmp_path: Any) -> Target:
    """Backends that encode their root themselves (an http root is the user's URL, escapes
    and all: tests/storage/test_h1.py covers it)."""
    return make_target(request.param, request, tmp_path, **SMALL_PARTS)


@pytest.fixture(params=[*CLOUD, "http"])
def remote_target(request: pytest.FixtureRequest, tmp_path: Any) -> Target:
    """Backends reached over HTTP, which the fault proxy can sit in front of."""
    return make_target(request.param, request, tmp_path, **SMALL_PARTS)


# fixtures of the reference's other remotes (dbfs, adls, oci, sftp), registered here
from .remotes import adls_filesystem, databricks_server, sftp_server  # noqa: E402, F401
