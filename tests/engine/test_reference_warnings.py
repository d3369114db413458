"""The reference's warnings, against astream's: for every case of
``scripts/gen_mosaic_warnings_golden.py`` astream warns where the reference warns -- the same
kind (``warnings.warn`` with the same category, or a logger's ``warning``), its message
carrying the same facts -- and is silent where the reference is silent.

The golden file is the reference's own answer to the same functions. ``DIFFERS`` lists the
cases where astream answers otherwise on purpose, each with the answer docs/migrating.md
states.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import astream
from scripts.gen_mosaic_warnings_golden import CASES, RANK_CASES, RANKS, run, write

_FILE = json.loads((Path(__file__).parent / "golden" / "mosaic_warnings.json").read_text())
GOLDEN, RANK_GOLDEN = _FILE["cases"], _FILE["rank_cases"]
# docs/migrating.md, "Warnings": device_per_stream warns of dropped batches only when some are
# dropped (the reference pads every stream by a whole batch when it divides evenly, and so
# warns for every stream, every epoch); a checkpoint taken before the first iteration names
# epoch 0 in astream (-1 in the reference, older than the next epoch, where the reference
# logs its num_canonical_nodes default at WARNING): it is not stale, so nothing is logged
DIFFERS: dict[str, list[dict]] = {
    "resume_before_training": [],
    "resume_mid_batch_device_per_stream": [
        {"kind": "log", "category": "WARNING", "facts": ["2", "device_per_stream"]}
    ],
}


def _carries(message_facts: list[str], facts: list[str]) -> bool:
    """Whether a message whose own facts are ``message_facts`` carries every one of
    ``facts``: astream may say more (a setting's name, a count), never less."""
    return set(facts) <= set(message_facts)


def _same(got: dict, want: list[dict], error: str | None) -> None:
    assert got["error"] == error, got
    assert len(got["warnings"]) == len(want), (want, got["warnings"])
    left = list(got["warnings"])
    for w in want:
        match = next(
            (
                g for g in left
                if (g["kind"], g["category"]) == (w["kind"], w["category"])
                and _carries(g["facts"], w["facts"])
            ),
            None,
        )  # fmt: skip
        assert match is not None, (w, got["warnings"])
        left.remove(match)


@pytest.mark.parametrize("case", sorted(CASES))
def test_as_the_reference(tmp_path: Path, case: str) -> None:
    write(astream, str(tmp_path))
    got = run(astream, str(tmp_path), case)
    _same(got, DIFFERS.get(case, GOLDEN[case]["warnings"]), GOLDEN[case]["error"])


@pytest.mark.parametrize("case", sorted(RANK_CASES))
def test_each_rank_as_the_reference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """Each rank of a 2-rank node, one after the other in this process (astream's ranks need
    nothing from each other to plan), against that rank of the reference's World."""
    write(astream, str(tmp_path))
    monkeypatch.setenv("WORLD_SIZE", str(RANKS))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(RANKS))
    for rank, ref in enumerate(RANK_GOLDEN[case]):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("LOCAL_RANK", str(rank))
        _same(run(astream, str(tmp_path), case, RANK_CASES), ref["warnings"], ref["error"])


# where the reference is silent: the defaults, and settings just inside each warning's bound
SILENT = {
    "defaults", "defaults_shuffled", "defaults_two_streams", "defaults_two_streams_shuffled",
    "defaults_loader", "defaults_writer", "stratified_whole_batches", "resume_on_a_batch",
    "resume_mid_batch_random", "predownload_at_batch_size", "block_over_shards",
    "writer_exist_ok_new_directory",
}  # fmt: skip


def test_silent_cases_are_silent_in_the_reference() -> None:
    """A regenerated golden that warns in one of these is a change of the reference to look
    at, not a new expectation; and every other case does warn (so it tests a warning)."""
    assert {c for c, v in GOLDEN.items() if not v["warnings"]} == SILENT


def test_golden_covers_every_case() -> None:
    assert set(GOLDEN) == set(CASES) and set(DIFFERS) <= set(CASES)
    assert set(RANK_GOLDEN) == set(RANK_CASES)
    assert all(len(ranks) == RANKS for ranks in RANK_GOLDEN.values())
