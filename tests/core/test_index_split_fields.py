"""Index validation of the split formats (json, csv, tsv, xsv): each field a split shard entry
carries beyond the common ones is checked, and an error names the shard and the field."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from astream.core.index import parse_index
from astream.errors import FormatError

DATA = Path(__file__).resolve().parent.parent / "golden" / "data" / "split"


def _index(name: str) -> dict[str, Any]:
    obj: dict[str, Any] = json.loads((DATA / name / "index.json").read_bytes())
    return obj


def test_golden_split_indexes_parse_to_their_fields() -> None:
    xsv = parse_index(json.dumps(_index("xsv_pipe")).encode(), "xsv").shards[0]
    assert (xsv.format, xsv.separator, xsv.newline) == ("xsv", "|", "\n")
    assert xsv.column_names == ["id", "name", "score"]
    assert xsv.column_encodings == ["int", "str", "float"]
    assert xsv.column_sizes == [None, None, None]
    assert xsv.raw_meta is not None and xsv.raw_meta.basename == "shard.00000.xsv.meta"
    js = parse_index(json.dumps(_index("json_plain")).encode(), "json").shards[0]
    assert js.column_names == ["alpha", "b_text", "mid", "zeta"]  # sorted column keys
    assert js.column_encodings == ["int", "str", "float", "str"]
    assert js.columns == {"alpha": "int", "b_text": "str", "mid": "float", "zeta": "str"}
    assert js.separator is None


def _set(obj: dict[str, Any], key: str, value: Any) -> None:
    obj[key] = value


CASES = [
    ("xsv_pipe", lambda s: _set(s, "column_encodings", ["int", "str", "float64"]),
     "shards[1].column_encodings[2]: unknown xsv encoding 'float64'"),
    ("json_plain", lambda s: s["columns"].update(mid="ndarray"),
     "shards[1].column_encodings[2]: unknown json encoding 'ndarray'"),
    ("xsv_pipe", lambda s: _set(s, "separator", ""), "shards[1].separator: must not be empty"),
    ("xsv_pipe", lambda s: _set(s, "separator", 7), "shards[1].separator: expected a string"),
    ("xsv_pipe", lambda s: _set(s, "column_names", ["id", "name"]),
     "shards[1]: column_names and column_encodings differ in length"),
    ("xsv_pipe", lambda s: _set(s, "column_names", ["id", "id", "score"]),
     "shards[1].column_names: duplicate column names"),
    ("json_plain", lambda s: _set(s, "columns", ["alpha"]),
     "shards[1].columns: expected an object"),
    ("xsv_pipe", lambda s: _set(s, "newline", None), "shards[1].newline: expected a string"),
    ("xsv_pipe", lambda s: _set(s, "zip_meta", copy.deepcopy(s["raw_meta"])),
     "shards[1].zip_meta: must be set exactly when compression is set"),
    ("json_plain", lambda s: _set(s, "raw_meta", None),
     "shards[1].raw_meta: expected {basename, bytes, hashes}"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "mutate", "message"), CASES)
def test_bad_split_field_is_refused_by_name(name: str, mutate: Any, message: str) -> None:
    obj = _index(name)
    assert len(obj["shards"]) >= 2
    mutate(obj["shards"][1])
    with pytest.raises(FormatError) as info:
        parse_index(json.dumps(obj).encode(), "idx.json")
    assert str(info.value).startswith(f"idx.json: {message}")
