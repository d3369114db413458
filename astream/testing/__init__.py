"""Public testing helpers: loopback emulators for every backend and a fault-injecting proxy.

Used by astream's own tests and benchmarks, and usable by anyone testing code built on astream.
:class:`GcsConditionProxy` adds to fake-gcs-server the write preconditions it ignores.
"""

from __future__ import annotations

from astream.testing.faultproxy import FaultProxy, ProxyStats
from astream.testing.gcsconditions import GcsConditionProxy
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
    "FakeGcsServer",
    "FaultProxy",
    "GcsConditionProxy",
    "MotoServer",
    "ProxyStats",
    "Server",
    "StaticHttpServer",
    "free_port",
]
