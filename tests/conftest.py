"""Root test configuration: the ``slow`` marker, fake credentials, and lazy loopback emulators.

Each emulator fixture is session-scoped and starts its server only when a test first asks for it
(moto S3, fake-gcs-server, Azurite, an aiohttp static HTTP server), on 127.0.0.1 with a free port,
and exports the environment variables that point astream at it. Sub-directory conftests add
their own fixtures on top of these.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import settings as hypothesis_settings

from astream.testing import (
    AzuriteServer,
    FakeGcsServer,
    FaultProxy,
    MotoServer,
    Server,
    StaticHttpServer,
)

_FAKE_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SECURITY_TOKEN": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
    # never the user's AWS config file (it would also send S3 reads through the SDK)
    "AWS_CONFIG_FILE": "/nonexistent/astream-tests/aws-config",
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/astream-tests/aws-credentials",
}


# CI (CI=true) draws the same hypothesis examples on every run, so that a submission's result
# does not depend on the draw; a developer's runs explore new examples each time.
hypothesis_settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    hypothesis_settings.load_profile("ci")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--quick",
        action="store_true",
        help="the developer loop: leave out the slow tests and the heavy modules (QUICK_OUT)",
    )


def pytest_configure(config: pytest.Config) -> None:
    # Fake credentials only: nothing in the test suite may reach a real cloud account.
    for k, v in _FAKE_ENV.items():
        os.environ[k] = v
    os.environ.pop("AWS_PROFILE", None)


# What `--quick` (scripts/test.sh --quick) leaves out besides the tests marked slow: modules
# whose cost is mostly starting processes (torchrun, Spark, Ray, DataLoader workers under
# spawn), kill trials and benchmarks. The default run and CI run everything.
QUICK_OUT = (
    "tests/bench/",
    "tests/trainers/",
    "tests/engine/test_eviction.py",
    "tests/engine/test_multiprocess.py",
    "tests/engine/test_reference_multiprocess.py",
    "tests/engine/test_slow_worker_restart.py",
    "tests/packing/test_multirank.py",
    "tests/packing/test_ring.py",
    "tests/parquet/test_bench.py",
    "tests/parquet/test_multiprocess.py",
    "tests/plan/test_scale.py",
    "tests/plan/test_validation.py",
    "tests/reliability/test_concurrency.py",
    "tests/reliability/test_crashes.py",
    "tests/reliability/test_disk_errors.py",
    "tests/reliability/test_fault_matrix.py",
    "tests/reliability/test_first_batch.py",
    "tests/reliability/test_lead_first.py",
    "tests/reliability/test_rewrite_in_place.py",
    "tests/storage/test_fetch_stream.py",
    "tests/storage/test_s3_models_cache.py",
    "tests/storage/test_startup.py",
    "tests/writer/test_engine_edges.py",
    "tests/writer/test_ray.py",
    "tests/writer/test_spark.py",
    # the dozen slowest of the rest (each 5-40 s): the quick loop stays near 3 minutes
    "tests/cli/test_demo_metrics.py",
    "tests/docs/test_docs.py",
    "tests/engine/test_loader_fidelity.py",
    "tests/engine/test_loop_bound.py",
    "tests/metrics/test_exporter.py",
    "tests/metrics/test_top.py",
    "tests/packing/test_dataset.py",
    "tests/plan/test_cli.py",
    "tests/plan/test_runs.py",
    "tests/reliability/test_hash_paths.py",
    "tests/writer/test_merge_remote.py",
    "tests/writer/test_remote_safety.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    quick = config.getoption("--quick")
    keep, out = [], []
    for item in items:
        path = item.nodeid.split("::")[0]
        heavy = quick and ("slow" in item.keywords or path.startswith(QUICK_OUT))
        (out if heavy else keep).append(item)
    if out:
        config.hook.pytest_deselected(items=out)
        items[:] = keep


def unique_name(prefix: str = "t") -> str:
    """A bucket/container-safe unique name (lowercase, digits, dashes)."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def _serve(server: Server) -> Iterator[Server]:
    server.start()
    saved = {k: os.environ.get(k) for k in server.env()}
    os.environ.update(server.env())
    try:
        yield server
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        server.stop()


@pytest.fixture(scope="session")
def s3_server() -> Iterator[Server]:
    """moto's S3 server; sets S3_ENDPOINT_URL and fake AWS credentials."""
    yield from _serve(MotoServer())


@pytest.fixture(scope="session")
def s3_auth_server() -> Iterator[MotoServer]:
    """moto's S3 server checking every SigV4 signature (``MotoServer(auth=True)``).

    Unlike ``s3_server`` it leaves ``os.environ`` alone: tests pass its keys
    (``access_key_id``, ``secret_access_key``, ``env()``) explicitly or with ``monkeypatch``.
    """
    server = MotoServer(auth=True).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def gcs_server() -> Iterator[Server]:
    """fake-gcs-server in memory; sets STORAGE_EMULATOR_HOST."""
    yield from _serve(FakeGcsServer())


@pytest.fixture(scope="session")
def azure_server() -> Iterator[Server]:
    """Azurite's blob service in memory; sets AZURE_STORAGE_CONNECTION_STRING."""
    yield from _serve(AzuriteServer())


@pytest.fixture(scope="session")
def http_root(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The directory the static HTTP server serves; write files here to publish them."""
    return str(tmp_path_factory.mktemp("http-root"))


@pytest.fixture(scope="session")
def http_server(http_root: str) -> Iterator[StaticHttpServer]:
    """An aiohttp static file server (honours Range) over ``http_root``."""
    server = StaticHttpServer(http_root).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def s3_bucket(s3_server: Server) -> str:
    """``s3://<bucket>`` of a session-wide bucket; tests use a unique prefix below it."""
    name = unique_name("s3")
    s3_server.create_bucket(name)
    return f"s3://{name}"


@pytest.fixture(scope="session")
def gcs_bucket(gcs_server: Server) -> str:
    name = unique_name("gcs")
    gcs_server.create_bucket(name)
    return f"gs://{name}"


@pytest.fixture(scope="session")
def azure_container(azure_server: Server) -> str:
    name = unique_name("az")
    azure_server.create_bucket(name)
    return f"az://{name}"


@pytest.fixture
def make_proxy() -> Iterator[Callable[..., FaultProxy]]:
    """``make_proxy(upstream_url, **settings)``: a started FaultProxy, stopped after the test."""
    proxies: list[FaultProxy] = []

    def make(upstream: str, **settings: Any) -> FaultProxy:
        proxy = FaultProxy(upstream, **settings).start()
        proxies.append(proxy)
        return proxy

    yield make
    for p in proxies:
        p.stop()


@pytest.fixture
def tmpfs(tmp_path: Any) -> Iterator[Callable[[int], str]]:
    """``tmpfs(kib)``: a directory on a tmpfs of that size (a disk that fills up), unmounted
    after the test. Mounting needs root: without it the test is skipped, saying so."""
    mounted: list[str] = []

    def mount(kib: int) -> str:
        d = tmp_path / f"tmpfs{len(mounted)}"
        d.mkdir()
        r = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={kib}k", "tmpfs", str(d)],
            capture_output=True,
            text=True,
        )
        if r.returncode != 0:
            pytest.skip(f"cannot mount a small tmpfs here (needs root): {r.stderr.strip()}")
        mounted.append(str(d))
        return str(d)

    yield mount
    for d in mounted:
        subprocess.run(["umount", "-l", d], check=False)


@pytest.fixture(params=[0o022, 0o002], ids=["umask022", "umask002"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    """The process umask set to 022, then 002, for one test (files must follow it)."""
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)
