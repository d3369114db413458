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


def test_stalled_and_failed_reps_are_counted_apart_from_the_clean_median() -> None:
    """A stalled rep (no result before the harness's timeout) and a failed one never enter the
    median: the cell is the median of the clean reps and says how many stalled/failed."""
    key = "hot/images/w2"
    recs = [
        _rec(key, "astream", 0, samples_per_s=100.0),
        _rec(key, "astream", 1, samples_per_s=120.0),
        _rec(key, "astream", 2, samples_per_s=110.0),
        _rec(key, "mosaic", 0, samples_per_s=40.0),
        {"key": key, "lib": "mosaic", "rep": 1, "status": "stalled", "reason": "no result"},
        _rec(key, "mosaic", 2, samples_per_s=60.0),
        {"key": key, "lib": "mosaic", "rep": 3, "status": "error", "reason": "OSError: x"},
        _rec(key, "lit", 0, samples_per_s=200.0),
    ]
    out = summarize(recs)
    mosaic = out["figures"][key]["mosaic"]
    assert mosaic["runs"] == {"clean": 2, "stalled": 1, "failed": 1}
    assert mosaic["samples_per_s"] == {"median": 50.0, "min": 40.0, "max": 60.0, "n": 2}
    assert out["figures"][key]["astream"]["runs"] == {"clean": 3, "stalled": 0, "failed": 0}
    meta = {"scale": 0.1, "samples": {"images": 100}, "shard_bytes": 1 << 20, "batch_size": 32,
            "reps": 3, "cpus": 2, "date": "d", "libs": ["astream", "mosaic", "lit"]}  # fmt: skip
    md = markdown({"meta": meta, **summarize(recs)})
    # astream 110 vs mosaic's clean median 50: 2.2x (folding the stall in as 0 would say 2.75x)
    row = "| hot/images/w2 | samples_per_s | 110 | 50 (2 clean, 1 stalled, 1 failed) | 200 |"
    assert row + " 2.2x | 0.55x |" in md
    assert "- `hot/images/w2` mosaic: ok 2/4; stalled: no result" in md


def test_matched_shuffle_column_gets_its_own_ratios_and_scores_have_none() -> None:
    key = "hot/tokens/w0"
    recs = [
        _rec(key, "astream", 0, samples_per_s=300.0, order_score=0.95),
        _rec(key, "astream-py1e", 0, samples_per_s=200.0, order_score=1.01),
        _rec(key, "mosaic", 0, samples_per_s=100.0, order_score=1.01),
        _rec(key, "lit", 0, samples_per_s=400.0, order_score=0.57),
        _rec("resume/tokens", "astream", 0, duplicates=0),
    ]
    meta = {"scale": 0.1, "samples": {"tokens": 100}, "shard_bytes": 1 << 20, "batch_size": 32,
            "reps": 1, "cpus": 2, "date": "d",
            "libs": ["astream", "mosaic", "lit", "astream-py1e"]}  # fmt: skip
    md = markdown({"meta": meta, **summarize(recs)})
    head = "| case | metric | astream | astream-py1e | mosaic | lit | vs mosaic | vs lit | "
    assert head + "astream-py1e vs mosaic | astream-py1e vs lit |" in md
    row = "| hot/tokens/w0 | samples_per_s | 300 | 200 | 100 | 400 |"
    assert row + " 3x | 0.75x | 2x | 0.5x |" in md
    assert "| hot/tokens/w0 | order_score | 0.95 | 1.01 | 1.01 | 0.57 |  |  |  |  |" in md
    # other scenarios have no astream-py1e column
    assert "| case | metric | astream | mosaic | lit | vs mosaic | vs lit |" in md


def test_lit_full_column_and_its_ratios_in_hot_only() -> None:
    key = "hot/tokens/w0"
    recs = [
        _rec(key, "astream", 0, samples_per_s=300.0, order_score=0.95),
        _rec(key, "astream-py1e", 0, samples_per_s=200.0, order_score=1.01),
        _rec(key, "lit", 0, samples_per_s=400.0, order_score=0.03),
        _rec(key, "lit-full", 0, samples_per_s=50.0, order_score=0.13),
        _rec("write/tokens", "astream", 0, mb_per_s=10.0),
        _rec("write/tokens", "lit", 0, mb_per_s=5.0),
    ]
    meta = {"scale": 0.1, "samples": {"tokens": 100}, "shard_bytes": 1 << 20, "batch_size": 32,
            "reps": 1, "cpus": 2, "date": "d",
            "libs": ["astream", "astream-py1e", "lit", "lit-full"]}  # fmt: skip
    md = markdown({"meta": meta, **summarize(recs)})
    head = "| case | metric | astream | astream-py1e | lit | lit-full | vs lit | vs lit-full | "
    assert head + "astream-py1e vs lit | astream-py1e vs lit-full |" in md
    row = "| hot/tokens/w0 | samples_per_s | 300 | 200 | 400 | 50 |"
    assert row + " 0.75x | 6x | 0.5x | 4x |" in md
    assert "| hot/tokens/w0 | order_score | 0.95 | 1.01 | 0.03 | 0.13 |  |  |  |  |" in md
    # writes have no variant columns and no ratio to them
    assert "| case | metric | astream | lit | vs lit |" in md
    assert "| write/tokens | mb_per_s | 10 | 5 | 2x |" in md


def test_a_runner_past_the_timeout_is_recorded_as_stalled_not_failed() -> None:
    from benchmarks.run import Harness, parse_args

    h = Harness(parse_args(["--timeout", "0.05", "--libs", "astream"]))
    r = h.run_one("astream-py1e", {"scenario": "epoch"})  # killed long before its import ends
    assert r == {"status": "stalled", "reason": "no result after 0.05 s"}
