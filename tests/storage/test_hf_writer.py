"""MDS datasets on the test Hub: MDSWriter and ``astream convert`` publish ONE commit; a
StreamingDataset over ``hf://`` gives an exact epoch (DataLoader workers included) and random
access, at the commit it pinned when it was built."""

from __future__ import annotations

import json
import os
import uuid
from typing import Any

import pytest

from astream import MDSWriter, StreamingDataLoader, StreamingDataset
from astream.cli import main
from astream.errors import ObjectChangedError, OutputExistsError
from astream.testing.hub import HubServer

from .conftest import HUB_TOKEN

COLUMNS = {"id": "int", "text": "str", "blob": "bytes"}


def samples(n: int, base: int = 0) -> list[dict[str, Any]]:
    return [
        {"id": base + i, "text": f"row {base + i} " * (i % 9), "blob": bytes([i % 251]) * (i * 7)}
        for i in range(n)
    ]


@pytest.fixture
def hub(hf_hub: HubServer, monkeypatch: pytest.MonkeyPatch) -> HubServer:
    """The test Hub as the machine's Hub: HF_ENDPOINT and HF_TOKEN point at it."""
    monkeypatch.setenv("HF_ENDPOINT", hf_hub.url)
    monkeypatch.setenv("HF_TOKEN", HUB_TOKEN)
    return hf_hub


def new_repo(hub: HubServer, files: dict[str, bytes] | None = None) -> str:
    repo = f"org/w-{uuid.uuid4().hex[:10]}"
    hub.create_repo(repo, gated=True)
    if files:
        hub.push(repo, files)
    return repo


def write(url: str, rows: list[dict[str, Any]], **kw: Any) -> None:
    with MDSWriter(out=url, columns=COLUMNS, size_limit=4096, **kw) as w:
        for r in rows:
            w.write(r)


def ids(loader: Any) -> list[int]:
    return sorted(int(i) for batch in loader for i in batch["id"])


def test_writer_publishes_one_commit_read_back_exactly(hub: HubServer, tmp_path: Any) -> None:
    repo = new_repo(hub, {"README.md": b"# card"})
    before = hub.commits(repo)
    rows = samples(240)
    write(f"hf://datasets/{repo}/mds", rows, max_workers=2)  # 2 LFS uploads at once
    assert hub.commits(repo) == before + 1  # every shard and the index in one commit
    files = hub.files(repo)
    shards = [p for p in files if p.startswith("mds/shard.")]
    assert "mds/index.json" in files and "README.md" in files and len(shards) > 3
    assert any(hub.is_lfs(repo, p) for p in shards)  # LFS through the batch API, the
    assert not hub.is_lfs(repo, "README.md")  # small files inline
    index = json.loads(files["mds/index.json"])
    assert sorted(f"mds/{s['raw_data']['basename']}" for s in index["shards"]) == sorted(shards)
    ds = StreamingDataset(remote=f"hf://datasets/{repo}/mds", local=str(tmp_path / "c"),
                          batch_size=8, shuffle=True)  # fmt: skip
    assert len(ds) == 240
    for i in (0, 1, 117, 239):
        assert ds[i] == rows[i]
    got = sorted(s["id"] for s in ds)
    assert got == list(range(240))
    loader = StreamingDataLoader(ds, batch_size=8, num_workers=2)
    assert ids(loader) == list(range(240))


def test_epoch_stays_on_the_pinned_commit_after_a_push(hub: HubServer, tmp_path: Any) -> None:
    repo = new_repo(hub)
    write(f"hf://datasets/{repo}/mds", samples(100))
    ds = StreamingDataset(remote=f"hf://datasets/{repo}/mds", local=str(tmp_path / "c"),
                          batch_size=4, shuffle=True)  # fmt: skip
    # someone pushes another dataset over it: 30 other samples, other shard bytes
    other = str(tmp_path / "other")
    with MDSWriter(out=other, columns=COLUMNS, size_limit=4096) as w:
        for r in samples(30, base=1000):
            w.write(r)
    pushed = {}
    for name in os.listdir(other):
        with open(os.path.join(other, name), "rb") as f:
            pushed[f"mds/{name}"] = f.read()
    hub.push(repo, pushed)
    assert json.loads(hub.files(repo)["mds/index.json"])["shards"][0]["samples"] != 0
    loader = StreamingDataLoader(ds, batch_size=4, num_workers=2)  # forked workers
    assert ids(loader) == list(range(100))
    assert ds[99]["id"] == 99


def test_non_empty_path_refused_or_replaced_in_one_commit(hub: HubServer) -> None:
    repo = new_repo(hub, {"mds/stale.bin": b"old", "keep/x.txt": b"x"})
    url = f"hf://datasets/{repo}/mds"
    with pytest.raises(OutputExistsError, match="is not empty"):
        write(url, samples(10))
    before = hub.commits(repo)
    write(url, samples(50), exist_ok=True)
    assert hub.commits(repo) == before + 1
    files = hub.files(repo)
    assert "mds/stale.bin" not in files and files["keep/x.txt"] == b"x"
    assert json.loads(files["mds/index.json"])["shards"]


def test_a_push_during_writing_fails_the_commit(hub: HubServer) -> None:
    repo = new_repo(hub, {"a.txt": b"a"})
    url = f"hf://datasets/{repo}/mds"
    w = MDSWriter(out=url, columns=COLUMNS, size_limit=4096)
    for r in samples(40):
        w.write(r)
    hub.push(repo, {"b.txt": b"someone else"})
    before = hub.commits(repo)
    with pytest.raises(ObjectChangedError, match="another writer pushed"):
        w.finish()
    w._sink.close()
    assert hub.commits(repo) == before
    assert not [p for p in hub.files(repo) if p.startswith("mds/")]


def test_convert_with_workers_is_one_commit(hub: HubServer, tmp_path: Any) -> None:
    repo = new_repo(hub)
    src = tmp_path / "in.jsonl"
    rows = [{"id": i, "text": f"t{i}" * (i % 13)} for i in range(300)]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    before = hub.commits(repo)
    url = f"hf://datasets/{repo}/conv"
    code = main(["convert", str(src), url, "--workers", "2", "--size-limit", "2kb"])
    assert code == 0
    assert hub.commits(repo) == before + 1
    files = hub.files(repo)
    assert "conv/index.json" in files and any(p.startswith("conv/part00001/") for p in files)
    ds = StreamingDataset(remote=url, local=str(tmp_path / "c"), batch_size=10)
    assert sorted(s["id"] for s in ds) == list(range(300))
    assert main(["convert", str(src), url, "--workers", "2"]) != 0 or pytest.fail(
        "a non-empty hf:// output must be refused without --exist-ok"
    )
