"""The report's arithmetic: medians over repetitions, failure statuses, ratio orientation."""

from __future__ import annotations

from typing import Any

from benchmarks.report import _ratio, markdown, summarize


def _rec(key: str, lib: str, rep: int, **kw: Any) -> dict[str, Any]:
    return {"key": key, "lib": lib, "rep": rep, "status": "ok", **kw}


def test_summarize_median_min_max_and_partial_failure() -> None:
    recs = [
        _rec("hot/tokens/w0", "mosaic", 0, samples_per_s=10.0),
        _rec("hot/tokens/w0", "mosaic", 1, samples_per_s=30.0),
        _rec("hot/tokens/w0", "mosaic", 2, samples_per_s=20.0),
        _rec("hot/tokens/w0", "lit", 0, samples_per_s=5.0),
        {"key": "hot/tokens/w0", "lib": "lit", "rep": 1, "status": "error", "reason": "boom"},
        {
            "key": "hot/tokens/w0",
            "lib": "astream",
            "rep": 0,
            "status": "n/a",
            "reason": "not built yet: x",
        },
    ]
    out = summarize(recs)
    assert out["figures"]["hot/tokens/w0"]["mosaic"]["samples_per_s"] == {
        "median": 20.0, "min": 10.0, "max": 30.0, "n": 3,
    }  # fmt: skip
    assert out["status"]["hot/tokens/w0"] == {
        "mosaic": "ok",
        "lit": "ok 1/2; error: boom",
        "astream": "n/a: not built yet: x",
    }
    assert "astream" not in out["figures"]["hot/tokens/w0"]


def test_ratio_is_oriented_so_above_one_means_astream_better() -> None:
    assert _ratio(200.0, 100.0, True) == "2x"  # throughput: higher is better
    assert _ratio(0.5, 2.0, False) == "4x"  # time: lower is better
    assert _ratio(2.0, 0.5, False) == "0.25x"
    assert _ratio(0.0, 0.0, False) == "="
    assert _ratio(0.0, 3.0, False) == "inf"
    assert _ratio(None, 3.0, True) == "n/a"


def test_markdown_rows_and_notes() -> None:
    recs = [
        _rec("resume/tokens", "astream", 0, resume_to_first_batch_s=0.1, duplicates=0, missing=0),
        _rec("resume/tokens", "mosaic", 0, resume_to_first_batch_s=0.3, duplicates=0, missing=0),
        {
            "key": "resume/tokens",
            "lib": "lit",
            "rep": 0,
            "status": "error",
            "reason": "KeyError: 'x'\nsecond line",
        },
    ]
    meta = {"scale": 0.1, "samples": {"tokens": 100}, "shard_bytes": 1 << 20, "batch_size": 32,
            "reps": 1, "cpus": 2, "date": "d", "libs": ["astream", "mosaic", "lit"]}  # fmt: skip
    md = markdown({"meta": meta, **summarize(recs)})
    assert "| resume/tokens | resume_to_first_batch_s | 0.1 | 0.3 | error | 3x | n/a |" in md
    assert "| resume/tokens | duplicates | 0 | 0 | error | = | n/a |" in md
    assert "- `resume/tokens` lit: error: KeyError: 'x'" in md
    assert "second line" not in md
