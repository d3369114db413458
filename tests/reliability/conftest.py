"""Fixtures for the reliability suite: self-checking datasets, one per cloud emulator, and the
storage options that send a dataset's traffic through a FaultProxy.

Every sample carries its own id and a payload that is a pure function of that id
(:func:`payload`), so a test checks *exact bytes* of every delivered sample without keeping the
dataset in memory, and a corrupt or misplaced sample can never pass.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from astream import MDSWriter
from astream.storage.sync import upload
from astream.testing import AzuriteServer, FaultProxy, Server

COLUMNS = {"data": "bytes", "id": "int"}
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.dirname(os.path.abspath(__file__))


def payload(i: int) -> bytes:
    """The bytes sample ``i`` must carry: 40..2040 bytes, a function of ``i`` only."""
    seed = hashlib.sha256(i.to_bytes(8, "little")).digest()
    n = 40 + int.from_bytes(seed[:2], "little") % 2000
    return (seed * (n // 32 + 1))[:n]


def write_ds(
    path: str,
    n: int,
    *,
    size_limit: int = 40_000,
    compression: str | None = None,
    hashes: list[str] | None = None,
    first: int = 0,
) -> str:
    with MDSWriter(
        out=path, columns=COLUMNS, size_limit=size_limit, compression=compression, hashes=hashes
    ) as w:
        for i in range(first, first + n):
            w.write({"id": i, "data": payload(i)})
    return path


def check_samples(samples: list[dict[str, Any]], ids: range | list[int]) -> None:
    """Every id exactly once, bytes exact (padding-free epochs only)."""
    got = sorted(int(s["id"]) for s in samples)
    assert got == sorted(ids), f"{len(got)} samples, ids differ from the {len(ids)} expected"
    for s in samples:
        assert bytes(s["data"]) == payload(int(s["id"])), f"sample {s['id']}: wrong bytes"


def shard_names(path: str) -> list[str]:
    return sorted(n for n in os.listdir(path) if n.startswith("shard."))


def job_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


@dataclass
class Cloud:
    """A dataset root on one cloud emulator and how to reach it directly or via a proxy."""

    name: str
    server: Server
    bucket: str

    def url(self, tag: str) -> str:
        return f"{self.bucket}/{tag}-{uuid.uuid4().hex[:8]}"

    def options(self, endpoint: str | None = None) -> dict[str, Any]:
        """``storage_options`` reaching the emulator at ``endpoint`` (a proxy) or directly."""
        ep = endpoint or self.server.url
        if self.name == "s3":
            return {"endpoint_url": ep, "region": "us-east-1", "path_style": True}
        if self.name == "gcs":
            return {"api_root": ep}
        assert isinstance(self.server, AzuriteServer)
        return {"connection_string": self.server.connection_string(f"{ep}/devstoreaccount1")}

    def via(self, proxy: FaultProxy) -> dict[str, Any]:
        return self.options(proxy.url)

    def upload(self, src: str, tag: str) -> str:
        url = self.url(tag)
        upload(src, url, **self.options())
        return url


_SERVER = {"s3": ("s3_server", "s3_bucket"), "gcs": ("gcs_server", "gcs_bucket")}
_SERVER["azure"] = ("azure_server", "azure_container")


@pytest.fixture(params=["s3", "gcs", "azure"])
def cloud(request: pytest.FixtureRequest) -> Cloud:
    server_fx, bucket_fx = _SERVER[request.param]
    return Cloud(
        request.param, request.getfixturevalue(server_fx), request.getfixturevalue(bucket_fx)
    )


@pytest.fixture(scope="session")
def plain_src(tmp_path_factory: pytest.TempPathFactory) -> str:
    """1,200 samples (~1.2 MB) in ~30 uncompressed shards, xxh64 hashes."""
    return write_ds(str(tmp_path_factory.mktemp("rel") / "plain"), 1200, hashes=["xxh64"])


@pytest.fixture(scope="session")
def zstd_src(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The same samples as zstd shards with sha1 + xxh64 hashes."""
    return write_ds(
        str(tmp_path_factory.mktemp("rel") / "zstd"),
        1200,
        compression="zstd",
        hashes=["sha1", "xxh64"],
    )


@pytest.fixture(scope="session")
def s3_plain(s3_server: Server, s3_bucket: str, plain_src: str) -> str:
    url = f"{s3_bucket}/plain-{uuid.uuid4().hex[:8]}"
    upload(plain_src, url)
    return url


@pytest.fixture(scope="session")
def s3_zstd(s3_server: Server, s3_bucket: str, zstd_src: str) -> str:
    url = f"{s3_bucket}/zstd-{uuid.uuid4().hex[:8]}"
    upload(zstd_src, url)
    return url


MakeProxy = Callable[..., FaultProxy]
