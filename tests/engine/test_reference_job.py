"""The issue's "done when": a job run on mosaicml-streaming 0.13.0 (its StreamingDataset and
StreamingDataLoader, 2 DataLoader workers) stopped mid-epoch, its ``state_dict()`` saved to a
file, resumes on astream from that file, and the concatenated sample stream equals the
reference's uninterrupted epoch -- batch for batch. The reference's runs and checkpoints were
recorded once by ``scripts/gen_mosaic_job_golden.py`` (``tests/order/golden/mosaic/jobs``: the
dataset written by the reference's MDSWriter, its checkpoints, its batches); this test runs
astream only. The epochs do not split evenly over the canonical nodes (203 samples over 3, 2,
and 64 -- py1s's default with ``num_canonical_nodes`` unset), so the reference's padding is
part of the stream."""

from __future__ import annotations

import json
import os
import shutil
from typing import Any

import pytest

from astream import StreamingDataLoader, StreamingDataset

JOBS_DIR = os.path.join(os.path.dirname(__file__), "..", "order", "golden", "mosaic", "jobs")
with open(os.path.join(JOBS_DIR, "jobs.json")) as _f:
    META = json.load(_f)
JOBS = META["jobs"]


def collate(batch: list[dict[str, Any]]) -> list[int]:
    return [int(s["x"]) for s in batch]


def _loader(tmp_path: Any, job: dict) -> StreamingDataLoader:
    local = str(tmp_path / "data")
    if not os.path.exists(local):
        shutil.copytree(os.path.join(JOBS_DIR, "data"), local)
    ds = StreamingDataset(
        local=local, shuffle=True, shuffle_algo=job["algo"], shuffle_seed=job["seed"],
        num_canonical_nodes=job["ncn"], shuffle_block_size=job["block"], batch_size=META["batch"],
    )  # fmt: skip
    return StreamingDataLoader(
        ds, batch_size=META["batch"], num_workers=META["workers"], collate_fn=collate
    )


@pytest.mark.parametrize("job", JOBS, ids=[j["name"] for j in JOBS])
def test_reference_job_resumes_on_astream(tmp_path: Any, job: dict) -> None:
    with open(os.path.join(JOBS_DIR, f"{job['name']}.state.json")) as f:
        state = json.load(f)  # the reference's checkpoint file, as it wrote it
    loader = _loader(tmp_path, job)
    loader.load_state_dict(state)
    rest = list(loader)
    assert rest == job["reference_resumed"]  # what the reference itself resumes with
    assert job["consumed"] + rest == job["whole"]  # the uninterrupted epoch, batch for batch


@pytest.mark.parametrize("job", JOBS[:2], ids=[j["name"] for j in JOBS[:2]])
def test_astream_job_is_the_reference_job(tmp_path: Any, job: dict) -> None:
    """The same job on astream from the start: the reference's epoch (padding included), and
    stopped at the same batch, the reference's checkpoint (its keys and values)."""
    assert list(_loader(tmp_path, job)) == job["whole"]
    loader = _loader(tmp_path, job)
    got = []
    for batch in loader:
        got.append(batch)
        if len(got) == job["stop"]:
            break
    assert got == job["consumed"]
    mine = loader.state_dict()
    assert {k: mine[k] for k in job["state"]} == job["state"]


RANK_JOBS = META["rank_jobs"]


@pytest.mark.parametrize("job", RANK_JOBS, ids=[j["name"] for j in RANK_JOBS])
def test_reference_two_rank_job_resumes_on_astream(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, job: dict
) -> None:
    """A reference job on one node x 2 ranks (torch.distributed, gloo), stopped mid-epoch: each
    astream rank, given the reference's checkpoint file, yields that rank's remainder; with
    what the rank consumed before, it is the rank's uninterrupted epoch (205 positions, so one
    rank also repeats a sample, as in the reference)."""
    with open(os.path.join(JOBS_DIR, f"{job['name']}.state.json")) as f:
        state = json.load(f)
    monkeypatch.setenv("WORLD_SIZE", str(job["ranks"]))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(job["ranks"]))
    for rank, ref in enumerate(job["ranks_out"]):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("LOCAL_RANK", str(rank))
        loader = _loader(tmp_path, job)
        loader.load_state_dict(state)
        rest = list(loader)
        assert rest == ref["resumed"], rank
        assert ref["consumed"] + rest == ref["whole"], rank
