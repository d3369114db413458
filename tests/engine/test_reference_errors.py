"""The reference's refusals of indexing, writing and resuming, against astream's: each error is
also an instance of the built-in type the reference raises, and each input the reference
refuses but astream accepts gives the answer docs/migrating.md states.

The golden file is the reference's own answer to the same functions
(``scripts/gen_mosaic_errors_golden.py``).
"""

from __future__ import annotations

import builtins
import json
import warnings
from pathlib import Path

import pytest

import astream
from astream.errors import AstreamError, IndexTypeError, MissingColumnError
from scripts.gen_mosaic_errors_golden import CASES, run, write

GOLDEN = json.loads((Path(__file__).parent / "golden" / "mosaic_errors.json").read_text())["cases"]
# refused by the reference, answered by astream (docs/migrating.md, "What differs, and why")
ACCEPTED = {
    "get_item_negative": {"value": {"x": 9}},  # as ds[-1], in both libraries
    "stream_without_samples_in_a_mix": {"value": 10},  # the other stream's samples
    "checkpoint_inside_the_padding": {"value": [16, 2]},  # the padded epoch's last 2
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_as_the_reference(tmp_path: Path, case: str) -> None:
    write(astream, str(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = run(astream, str(tmp_path), case)
    ref = GOLDEN[case]
    if case in ACCEPTED:
        assert "error" in ref and got == ACCEPTED[case], (ref, got)
    elif "value" in ref:
        assert got == ref
    else:
        assert "error" in got, got
        again = tmp_path / "again"
        write(astream, str(again))
        with warnings.catch_warnings(), pytest.raises(Exception) as err:
            warnings.simplefilter("ignore")
            CASES[case](astream, str(again))
        assert isinstance(err.value, getattr(builtins, ref["error"])), (ref, err.value)


def test_the_typed_errors(tmp_path: Path) -> None:
    write(astream, str(tmp_path))
    ds = astream.StreamingDataset(local=str(tmp_path / "a"), batch_size=2)
    with pytest.raises(IndexTypeError, match="got float") as got:
        ds[1.5]
    assert isinstance(got.value, ValueError) and isinstance(got.value, TypeError)
    w = astream.MDSWriter(out=str(tmp_path / "w"), columns={"x": "int"})
    with pytest.raises(MissingColumnError) as missing:
        w.write({"y": 1})
    assert isinstance(missing.value, KeyError) and isinstance(missing.value, AstreamError)
    assert str(missing.value) == "sample is missing column 'x'"  # not quoted as a key
    w.finish()


def test_golden_covers_every_case() -> None:
    assert set(GOLDEN) == set(CASES) and set(ACCEPTED) <= set(CASES)
