"""The shard size limit at its exact boundary, against the reference writer (mosaicml-streaming
0.13.0, fixture data/exact_limit from scripts/gen_golden.py --only exact_limit).

A shard whose bytes land exactly on ``size_limit`` is not over the limit: the sample that
fills it stays in it. Flushing at ``>=`` instead of ``>`` moves that sample to the next shard,
and every file from there on differs from the reference's."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import golden_samples as gs

from astream.local import LocalDataset
from astream.writer.mds import MDSWriter

DATA = Path(__file__).resolve().parent / "data" / "exact_limit"


def _shards(root: Path) -> list[tuple[int, int]]:
    with open(root / "index.json") as f:
        return [(s["samples"], s["raw_data"]["bytes"]) for s in json.load(f)["shards"]]


def test_reference_fills_shards_exactly_to_the_limit() -> None:
    spec = gs.SPECS["exact_limit"]
    limit = spec["size_limit"]
    ref = _shards(DATA)
    # the fixture does what it claims: shards of exactly size_limit bytes, none over
    assert [b for _, b in ref].count(limit) == 2
    assert all(b <= limit for _, b in ref)
    assert sum(n for n, _ in ref) == len(gs.samples_for("exact_limit"))


def test_writer_matches_the_reference_at_the_exact_limit(tmp_path: Path) -> None:
    spec = gs.SPECS["exact_limit"]
    out = tmp_path / "out"
    rows = gs.samples_for("exact_limit")
    with MDSWriter(
        out=str(out),
        columns=spec["columns"],
        compression=spec["compression"],
        hashes=spec["hashes"],
        size_limit=spec["size_limit"],
    ) as w:
        for row in rows:
            w.write(row)
    assert _shards(out) == _shards(DATA)
    for ref_file in sorted(DATA.iterdir()):
        assert (out / ref_file.name).read_bytes() == ref_file.read_bytes(), ref_file.name
    assert [s["blob"] for s in LocalDataset(str(DATA))] == [r["blob"] for r in rows]
