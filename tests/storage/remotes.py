"""Contract-suite targets for the reference's other remotes: Databricks (both APIs, on the
test server of astream.testing.databricks), ADLS Gen2 (Azurite's blob endpoint), OCI (its
S3-compatible route, on moto) and SFTP (asyncssh's server on 127.0.0.1)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from astream.testing.databricks import DatabricksServer
from astream.testing.servers import AZURITE_KEY
from astream.testing.sftp import SftpServer

if TYPE_CHECKING:
    from .conftest import Target

DATABRICKS_TOKEN = "dapi-test-token"
OCI_NAMESPACE = "testns"
OCI_REGION = "us-ashburn-1"


@pytest.fixture(scope="session")
def databricks_server() -> Iterator[DatabricksServer]:
    """The Databricks file-API test server; ``/Volumes/main/default/secret`` is refused."""
    srv = DatabricksServer(DATABRICKS_TOKEN, denied=("/Volumes/main/default/secret",)).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def sftp_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SftpServer]:
    """asyncssh's SFTP server, chrooted to a session directory (its ``data/`` holds roots)."""
    srv = SftpServer(str(tmp_path_factory.mktemp("sftp-root"))).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def adls_filesystem(azure_server: Any) -> str:
    """A container on Azurite, the file system an ``azure-dl://`` URL names."""
    name = f"adls{id(azure_server) % 100000}"
    azure_server.create_bucket(name)
    return name


def make_remote_target(name: str, request: pytest.FixtureRequest, prefix: str) -> Target:
    from .conftest import Target

    if name in ("dbfs-volumes", "dbfs"):
        srv = request.getfixturevalue("databricks_server")
        opts = {**srv.store_options(), "list_page_size": 2}
        root = "/Volumes/main/default/vol" if name == "dbfs-volumes" else "/tmp/astream"
        return Target(name, f"dbfs:{root}/{prefix}", opts, upstream=srv.url, extra={"srv": srv})
    if name == "adls":
        fs = request.getfixturevalue("adls_filesystem")
        srv = request.getfixturevalue("azure_server")
        opts = {
            "endpoint": srv.blob_endpoint,
            "account_key": AZURITE_KEY,
            "list_page_size": 2,
            "max_single_put_size": 1 << 20,
            "max_block_size": 1 << 20,
        }
        url = f"azure-dl://{fs}@devstoreaccount1.dfs.core.windows.net/{prefix}"
        return Target(name, url, opts, upstream=srv.url, server=srv)
    if name == "oci":
        bucket = request.getfixturevalue("s3_bucket")[len("s3://") :]
        srv = request.getfixturevalue("s3_server")
        opts = {
            "endpoint_url": srv.url,
            "region": OCI_REGION,
            "access_key_id": srv.access_key_id,
            "secret_access_key": srv.secret_access_key,
            "list_page_size": 2,
            "multipart_threshold": 5 << 20,
            "part_size": 5 << 20,
        }
        url = f"oci://{bucket}@{OCI_NAMESPACE}/{prefix}"
        return Target(name, url, opts, upstream=srv.url, server=srv)
    if name == "sftp":
        srv = request.getfixturevalue("sftp_server")
        url = f"{srv.url}/data/{prefix}"
        return Target(name, url, srv.store_options(), extra={"srv": srv})
    raise AssertionError(name)
