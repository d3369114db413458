"""Azure reads bypass the SDK (one signed GET on our session): on Azurite, which checks every
SharedKey signature, with the three ways a store authenticates (account key, SAS token,
anonymous), names that need encoding, conditional reads, and the SDK fallback."""

from __future__ import annotations

import datetime as dt
import random
import uuid
from collections.abc import AsyncIterator

import pytest
from azure.storage.blob import ContainerSasPermissions, PublicAccess, generate_container_sas
from azure.storage.blob.aio import ContainerClient

from astream.errors import ObjectChangedError, ObjectNotFoundError
from astream.storage import open_store
from astream.storage.azure import AzureBackend, _Direct
from astream.storage.base import ObjectStore
from astream.testing.servers import AZURITE_ACCOUNT, AZURITE_KEY, Server

DATA = random.Random(7).randbytes(300_000)
NAMES = ["plain.bin", "dir/a b+c%d ü=é.bin", "x/~y/(z)!'*.bin"]


@pytest.fixture
async def container(azure_server: Server) -> AsyncIterator[str]:
    name = f"direct-{uuid.uuid4().hex[:10]}"
    conn = azure_server.connection_string()  # type: ignore[attr-defined]
    async with ContainerClient.from_connection_string(conn, name) as cc:
        await cc.create_container()
        for n in NAMES:
            await cc.upload_blob(n, DATA)
        yield name


def _sdk_calls(store: ObjectStore) -> list[int]:
    """Count the SDK reads a store makes (the fallback path)."""
    raw = store.raw  # type: ignore[attr-defined]
    calls = [0]
    real = AzureBackend._iter_sdk

    def counted(self: AzureBackend, *a: object, **kw: object) -> object:
        calls[0] += 1
        return real(self, *a, **kw)  # type: ignore[arg-type]

    raw._iter_sdk = counted.__get__(raw)
    return calls


async def _check_reads(store: ObjectStore) -> None:
    for n in NAMES:
        assert await store.get_range(n) == DATA
        assert await store.get_range(n, 1000, 2000) == DATA[1000:2000]
        assert await store.get_range(n, 299_990) == DATA[299_990:]
        assert await store.get_range(n, 299_990, 400_000) == DATA[299_990:]
        assert await store.get_range(n, 400_000) == b""  # past the end: empty
    with pytest.raises(ObjectNotFoundError) as ei:
        await store.get_range("missing.bin", 0, 10)
    assert ei.value.url == store.url_for("missing.bin")


async def test_shared_key_reads_bypass_the_sdk(azure_server: Server, container: str) -> None:
    store = open_store(f"az://{container}", **azure_server.store_options())
    calls = _sdk_calls(store)
    try:
        await _check_reads(store)
        assert store.raw._direct is not None and store.raw._direct.key is not None  # type: ignore[attr-defined]
        assert calls == [0]
    finally:
        await store.aclose()


async def test_sas_and_anonymous_reads(azure_server: Server, container: str) -> None:
    endpoint = azure_server.blob_endpoint  # type: ignore[attr-defined]
    sas = generate_container_sas(
        AZURITE_ACCOUNT,
        container,
        account_key=AZURITE_KEY,
        permission=ContainerSasPermissions(read=True, list=True),
        expiry=dt.datetime.now(dt.UTC) + dt.timedelta(hours=1),
    )
    conn = f"BlobEndpoint={endpoint};SharedAccessSignature={sas}"
    store = open_store(f"az://{container}", connection_string=conn)
    try:
        await _check_reads(store)
        assert store.raw._direct.key is None and store.raw._direct.query  # type: ignore[attr-defined]
    finally:
        await store.aclose()
    async with ContainerClient.from_connection_string(
        azure_server.connection_string(),
        container,  # type: ignore[attr-defined]
    ) as cc:
        await cc.set_container_access_policy({}, public_access=PublicAccess.CONTAINER)
    store = open_store(f"az://{container}", endpoint=endpoint)  # no credentials: anonymous
    try:
        await _check_reads(store)
    finally:
        await store.aclose()


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "sdk"])
async def test_conditional_read_names_the_rewritten_object(
    azure_server: Server, container: str, direct: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not direct:  # e.g. a token credential: the SDK's download_blob reads
        monkeypatch.setattr(_Direct, "of", classmethod(lambda cls, client: None))
    store = open_store(f"az://{container}", **azure_server.store_options())
    calls = _sdk_calls(store)
    name = NAMES[1]
    try:
        (info,) = [o async for o in store.list("dir/")]
        assert info.key == name
        assert await store.get_range(name, 10, 20, etag=info.etag) == DATA[10:20]
        head = await store.head(name)  # quoted ETag from a header, unquoted from the listing
        assert await store.get_range(name, 10, 20, etag=head.etag) == DATA[10:20]
        async with ContainerClient.from_connection_string(
            azure_server.connection_string(),
            container,  # type: ignore[attr-defined]
        ) as cc:
            await cc.upload_blob(name, DATA[::-1], overwrite=True)
        with pytest.raises(ObjectChangedError, match="changed since the index was built") as ei:
            await store.get_range(name, 10, 20, etag=info.etag)
        assert ei.value.url == store.url_for(name)
        assert await store.get_range(name, 10, 20) == DATA[::-1][10:20]
        assert (calls[0] > 0) is not direct
    finally:
        await store.aclose()
