"""Public testing helpers: loopback emulators for every backend and a fault-injecting proxy.

Used by astream's own tests and benchmarks, and usable by anyone testing code built on astream.
:class:`GcsConditionProxy` adds to fake-gcs-server the write preconditions it ignores;
:class:`GcsXmlGateway` serves GCS's XML API (HMAC keys) in front of it.
:class:`DatabricksServer` answers the Databricks Files and DBFS APIs; :class:`RecordingProxy`
keeps the headers each request carried. The SFTP server is ``astream.testing.sftp.SftpServer``
(it needs the ``sftp`` extra).

May import: the standard library, aiohttp, and an emulator's own packages (moto, botocore,
fake-gcs-server, azure-storage-blob, asyncssh) inside the server that needs them; nothing of
astream, so a test of any part of astream may use it. tests/test_layers.py checks it.
"""

from __future__ import annotations

from astream.testing.databricks import DatabricksServer
from astream.testing.faultproxy import FaultProxy, ProxyStats
from astream.testing.gcsconditions import GcsConditionProxy
from astream.testing.gcsxml import GcsXmlGateway
from astream.testing.hub import HubServer
from astream.testing.recorder import RecordingProxy
from astream.testing.servers import (
    AzuriteServer,
    FakeGcsServer,
    MotoServer,
    Server,
    StaticHttpServer,
    free_port,
)

__all__ = [
    "AzuriteServer",
    "DatabricksServer",
    "FakeGcsServer",
    "FaultProxy",
    "GcsConditionProxy",
    "GcsXmlGateway",
    "HubServer",
    "MotoServer",
    "ProxyStats",
    "RecordingProxy",
    "Server",
    "StaticHttpServer",
    "free_port",
]
