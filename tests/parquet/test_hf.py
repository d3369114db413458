"""A Parquet dataset laid out as the Hub lays it out (``data/train-0000k-of-00004.parquet``),
streamed over ``hf://`` from the test Hub: the ``train`` split exactly, random access, the
``columns=`` projection, exact resumption on another world shape, an unknown split refused,
and the epoch pinned to the commit the dataset was built on."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from astream import Stream, StreamingDataLoader, StreamingDataset
from astream.errors import EmptyDatasetError
from astream.testing.hub import HubServer

from .conftest import same, write_table

TOKEN = "hf_parquet_token"
TRAIN = [(30, 7), (50, 16), (80, 40), (10, 100)]  # 170 rows, 12 row groups, 4 files


@pytest.fixture(scope="module")
def hub() -> Iterator[HubServer]:
    server = HubServer(tokens=(TOKEN,), page_size=2, lfs_threshold=2048).start()
    yield server
    server.stop()


@pytest.fixture
def hub_repo(
    hub: HubServer, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
    """A gated repository with 4 train files and 1 test file under data/, on branch v1; its
    URL (at v1), the train rows and the test rows."""
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    root = str(tmp_path / "table")
    train = write_table(root, TRAIN, prefix="train")
    test = write_table(root, [(20, 8)], prefix="test", start=1000)
    files = {}
    for k in range(4):
        with open(os.path.join(root, f"train-{k}.parquet"), "rb") as f:
            files[f"data/train-{k:05d}-of-00004.parquet"] = f.read()
    with open(os.path.join(root, "test-0.parquet"), "rb") as f:
        files["data/test-00000-of-00001.parquet"] = f.read()
    files["README.md"] = b"---\nconfigs: [default]\n---\n"
    repo = f"org/pq-{uuid.uuid4().hex[:8]}"
    hub.create_repo(repo, gated=True)
    hub.push(repo, files, branch="v1")
    return f"hf://datasets/{repo}@v1", train, test


def test_train_split_exact_epoch_random_access_projection(hub_repo: Any, tmp_path: Any) -> None:
    url, train, _ = hub_repo
    cols = ["label", "img", "tok"]
    ds = StreamingDataset(
        streams=[
            Stream(
                remote=url, local=str(tmp_path / "c"), format="parquet", columns=cols, split="train"
            )
        ],
        batch_size=8,
        shuffle=True,
    )
    assert len(ds) == 170
    want = [{c: r[c] for c in cols} for r in train]
    got = sorted(ds, key=lambda s: s["label"])
    assert len(got) == 170 and all(same(g, w) for g, w in zip(got, want))
    for i in (0, 29, 30, 169):
        assert same(ds[i], want[i])
    loader = StreamingDataLoader(
        ds, batch_size=8, num_workers=2, collate_fn=lambda b: [s["label"] for s in b]
    )
    assert sorted(x for b in loader for x in b) == list(range(170))


def test_test_split_and_unknown_split(hub_repo: Any, tmp_path: Any) -> None:
    url, _, test = hub_repo
    ds = StreamingDataset(
        remote=url, local=str(tmp_path / "t"), format="parquet", split="test", batch_size=4
    )
    assert sorted(s["label"] for s in ds) == [r["label"] for r in test]
    with pytest.raises(EmptyDatasetError, match="split 'validation'"):
        StreamingDataset(
            remote=url,
            local=str(tmp_path / "v"),
            format="parquet",
            split="validation",
            batch_size=4,
        )


def labels(b: list[dict[str, Any]]) -> list[int]:
    return [int(s["label"]) for s in b]


def ranks(
    url: str, local: str, mp: pytest.MonkeyPatch, n: int, workers: int, bs: int, state: Any = None
) -> list[list[int]]:
    """Global batches of an ``n``-rank job (ranks run one after the other here)."""
    per = []
    for r in range(n):
        mp.setenv("RANK", str(r))
        mp.setenv("WORLD_SIZE", str(n))
        mp.setenv("LOCAL_WORLD_SIZE", str(n))
        ds = StreamingDataset(
            streams=[
                Stream(remote=url, local=local, format="parquet", columns=["label"], split="train")
            ],
            batch_size=bs,
            shuffle=True,
            num_canonical_nodes=1,
        )
        ld = StreamingDataLoader(ds, batch_size=bs, num_workers=workers, collate_fn=labels)
        if state is not None:
            ld.load_state_dict(state)
        per.append(list(ld))
    return [sorted(x for r in range(n) for x in per[r][j]) for j in range(len(per[0]))]


def test_resume_mid_epoch_on_another_world_shape(
    hub_repo: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _, _ = hub_repo
    local = str(tmp_path / "c")
    four = ranks(url, local, monkeypatch, 4, 0, 4)  # global batches of 16
    state = {"epoch": 0, "sample_in_epoch": 5 * 16, "num_canonical_nodes": 1, "shuffle_seed": 9176}
    two = ranks(url, local, monkeypatch, 2, 2, 8, state)
    assert two[:-1] == four[5:-1] and set(two[-1]) == set(four[-1])
    seen = [x for b in four[:5] for x in b] + [x for b in two for x in b]
    assert sorted(seen) == list(range(170))


def test_a_push_after_construction_does_not_change_the_epoch(
    hub: HubServer, hub_repo: Any, tmp_path: Any
) -> None:
    url, train, _ = hub_repo
    repo = url[len("hf://datasets/") :].split("@")[0]
    ds = StreamingDataset(
        remote=url,
        local=str(tmp_path / "c"),
        format="parquet",
        split="train",
        columns=["label"],
        batch_size=4,
    )
    other = str(tmp_path / "other")
    write_table(other, [(5, 5)], prefix="train", start=5000)
    with open(os.path.join(other, "train-0.parquet"), "rb") as f:
        hub.push(
            repo,
            {
                "data/train-00000-of-00004.parquet": f.read(),
                "data/train-00004-of-00005.parquet": b"not parquet",
            },
            branch="v1",
        )
    loader = StreamingDataLoader(ds, batch_size=4, num_workers=2, collate_fn=labels)
    assert sorted(x for b in loader for x in b) == [r["label"] for r in train]
