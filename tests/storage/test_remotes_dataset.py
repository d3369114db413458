"""An MDS dataset read through the reference's other remotes: a full epoch (in the process,
and through DataLoader workers), random access and an exact mid-epoch resume, from
dbfs:/Volumes (Files API), dbfs:/ (DBFS API), azure-dl://, oci:// and sftp://, each on its
server on 127.0.0.1."""

from __future__ import annotations

import os
import uuid
from typing import Any

import numpy as np
import pytest

from astream import MDSWriter, StreamingDataLoader, StreamingDataset
from astream.storage.sync import upload

COLUMNS = {"ids": "ndarray:uint16", "label": "int", "text": "str"}
N = 300


@pytest.fixture(scope="module")
def mds(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[dict[str, Any]]]:
    path = str(tmp_path_factory.mktemp("remotes-ds") / "ds")
    rng = np.random.default_rng(3)
    samples = []
    with MDSWriter(out=path, columns=COLUMNS, size_limit=8_000) as w:
        for i in range(N):
            ids = rng.integers(0, 60000, size=int(rng.integers(4, 40))).astype(np.uint16)
            s = {"ids": ids, "label": i, "text": f"sample-{i}"}
            samples.append(s)
            w.write(s)
    return path, samples


def remote(kind: str, request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    name = f"ds-{uuid.uuid4().hex[:8]}"
    if kind == "sftp":
        srv = request.getfixturevalue("sftp_server")
        return f"{srv.url}/data/{name}", srv.store_options()
    srv = request.getfixturevalue("databricks_server")
    root = "/Volumes/main/default/vol" if kind == "dbfs-volumes" else "/tmp/astream"
    return f"dbfs:{root}/{name}", srv.store_options()


@pytest.mark.parametrize("kind", ["dbfs-volumes", "dbfs", "sftp"])
def test_epoch_and_random_access(
    kind: str, mds: tuple[str, list[dict[str, Any]]], request: pytest.FixtureRequest, tmp_path: Any
) -> None:
    src, samples = mds
    url, opts = remote(kind, request)
    keys = upload(src, url, **opts)
    assert sorted(keys) == sorted(os.listdir(src))
    ds = StreamingDataset(
        remote=url, local=str(tmp_path / "cache"), batch_size=4, storage_options=opts
    )
    got = list(ds)
    assert sorted(int(s["label"]) for s in got) == list(range(N))
    for s in got:
        assert s["text"] == f"sample-{s['label']}"
        assert np.array_equal(s["ids"], samples[s["label"]]["ids"])
    fresh = StreamingDataset(
        remote=url, local=str(tmp_path / "cold"), batch_size=4, storage_options=opts
    )
    for i in (0, 137, N - 1, -2):
        want = samples[i]
        assert fresh[i]["label"] == want["label"]
        assert np.array_equal(fresh[i]["ids"], want["ids"])


@pytest.mark.parametrize("kind", ["dbfs-volumes", "sftp"])
def test_dataloader_workers_read_the_remote(
    kind: str, mds: tuple[str, list[dict[str, Any]]], request: pytest.FixtureRequest, tmp_path: Any
) -> None:
    src, _ = mds
    url, opts = remote(kind, request)
    upload(src, url, **opts)
    ds = StreamingDataset(
        remote=url,
        local=str(tmp_path / "cache"),
        batch_size=10,
        shuffle=True,
        storage_options=opts,
    )
    loader = StreamingDataLoader(ds, batch_size=10, num_workers=2, collate_fn=lambda b: b)
    labels = [int(s["label"]) for batch in loader for s in batch]
    assert sorted(labels) == list(range(N))
    assert labels != list(range(N))  # shuffled: read across shards, not in file order


def test_a_dbfs_remote_without_local_is_cached_under_the_cache_dir(
    mds: tuple[str, list[dict[str, Any]]],
    request: pytest.FixtureRequest,
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    src, _ = mds
    url, opts = remote("dbfs-volumes", request)
    upload(src, url, **opts)
    monkeypatch.setenv("ASTREAM_CACHE_DIR", str(tmp_path / "cache-dir"))
    ds = StreamingDataset(remote=url, batch_size=4, storage_options=opts)  # dbfs:/, one slash
    assert sorted(int(s["label"]) for s in ds) == list(range(N))
    assert os.listdir(tmp_path / "cache-dir")  # not read in place as a local path "dbfs:"
    assert not os.path.exists("dbfs:")


@pytest.mark.parametrize("kind", ["dbfs-volumes", "dbfs", "adls", "oci", "sftp"])
def test_shuffled_epoch_resumes_exactly_through_the_remote(
    kind: str, mds: tuple[str, list[dict[str, Any]]], request: pytest.FixtureRequest, tmp_path: Any
) -> None:
    """A shuffled epoch at the default order from each remote, a checkpoint after 101 samples,
    and a new dataset on a cold cache resuming from it: the rest of the epoch, sample for sample
    as the uninterrupted run; and random access on the cold cache."""
    from .remotes import make_remote_target

    src, samples = mds
    target = make_remote_target(kind, request, f"resume-{uuid.uuid4().hex[:8]}")
    url, opts = target.url, target.options
    upload(src, url, **opts)

    def dataset(cache: str) -> StreamingDataset:
        return StreamingDataset(
            remote=url,
            local=str(tmp_path / cache),
            batch_size=4,
            shuffle=True,
            shuffle_seed=7,
            storage_options=opts,
        )

    whole = [int(s["label"]) for s in dataset("a")]
    assert sorted(whole) == list(range(N))
    assert whole != list(range(N))  # shuffled
    first = dataset("b")
    it = iter(first)
    head = [int(next(it)["label"]) for _ in range(101)]
    state = first.state_dict(101, True)
    resumed = dataset("c")
    resumed.load_state_dict(state)
    rest = [int(s["label"]) for s in resumed]
    assert head + rest == whole
    cold = dataset("d")
    for i in (5, 150, N - 1):
        assert cold[i]["label"] == i
        assert np.array_equal(cold[i]["ids"], samples[i]["ids"])
