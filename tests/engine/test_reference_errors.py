"""The reference's refusals of indexing, writing and resuming, against astream's: each error is
also an instance of the built-in type the reference raises, and each input the reference
refuses but astream accepts gives the answer docs/migrating.md states.

The golden file is the reference's own answer to the same functions
(``scripts/gen_mosaic_errors_golden.py``).
"""

from __future__ import annotations

import builtins
import json
import re
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
# the `match=` patterns of the reference's own tests (tests/test_encodings.py, test_util.py,
# test_streaming.py, test_reader.py, test_writer.py): both libraries' messages match them
MESSAGES = {
    "encode_ndarray_without_elements": "Attempting to encode a numpy array with 0 elements",
    "encode_ndarray_scalar": "Attempting to encode a scalar with NDArray encoding",
    "bytes_text_empty": "Unsupported value/suffix ",
    "bytes_text_bad_suffix": "Unsupported value/suffix '?12kbb",
    "number_text_bad_suffix": "Unsupported value/suffix '?79bk",
    "sampling_method_unknown": "Invalid sampling method: '?ayo",
    "dataset_without_samples": "Stream contains no samples: '?<data>/e\\b",
    "writer_size_limit_over_u32": "`size_limit` must be less than 2\\*\\*32",
    "writer_unknown_argument": r"Invalid Writer argument\(s\).*\['min_workers'\]",
    "writer_output_not_empty": "Directory is not empty",
    "unsafe_type_not_allowed": "contains an unsafe type",
    "local_without_index": "No `remote` provided, but local file <data>/none/index.json",
    "fewer_samples_than_canonical_nodes": "The number of samples assigned to a canonical node",
}


@pytest.mark.parametrize("case", sorted(MESSAGES))
def test_message_as_the_reference(tmp_path: Path, case: str) -> None:
    write(astream, str(tmp_path))
    ref = GOLDEN[case]
    assert "error" in ref and re.search(MESSAGES[case], ref["message"]), ref
    with warnings.catch_warnings(), pytest.raises(getattr(builtins, ref["error"])) as err:
        warnings.simplefilter("ignore")
        CASES[case](astream, str(tmp_path))
    assert isinstance(err.value, AstreamError)
    assert re.search(MESSAGES[case], str(err.value).replace(str(tmp_path), "<data>")), err.value


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
    assert set(MESSAGES) <= set(CASES)
