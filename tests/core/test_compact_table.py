"""The compact copy of a shard table reads back equal to the table it was written from: every
entry (templates, sizes, sample counts, digests, zip files), the extra keys and the metadata;
a cut file is refused with ValueError, never read short."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from astream.core.index import Index, dump_index, parse_index, parse_index_validating
from astream.core.shard_table import compact_meta, from_compact
from tests.core.test_index_fast import _shard


def _templates(objs: list[dict[str, Any]]) -> list[Any]:
    doc = json.dumps({"shards": objs, "version": 2}).encode()
    return list(parse_index_validating(doc, "t").shards)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rows=st.lists(
        st.tuples(
            st.integers(0, 2),
            st.sampled_from([None, "zstd"]),
            st.sampled_from([[], ["sha1"], ["sha1", "xxh64"]]),
            st.integers(0, 50),
        ),
        min_size=1,
        max_size=40,
    ),
    extra=st.dictionaries(st.sampled_from(["a", "note"]), st.integers(), max_size=2),
)
def test_compact_round_trip(rows: list[Any], extra: dict[str, int], tmp_path: Any) -> None:
    shards = [_shard(i, cfg, comp, hashes, n) for i, (cfg, comp, hashes, n) in enumerate(rows)]
    data = json.dumps({"shards": shards, "version": 2, **extra}).encode()
    index = parse_index(data, "x")
    blob = index.table.to_compact({"digest": "d", "etag": "e", "size": len(data)}, index.extra)
    assert blob is not None  # the fast parser's table: columnar
    path = os.path.join(str(tmp_path), "c")
    with open(path, "wb") as f:
        f.write(blob)
    table, got_extra, meta = from_compact(path, _templates)
    assert meta == {"digest": "d", "etag": "e", "size": len(data)} == compact_meta(path)
    assert got_extra == index.extra
    assert list(table) == list(index.shards)
    assert table.footprints().tolist() == index.table.footprints().tolist()
    assert [i for i, _ in table.configs()] == [i for i, _ in index.table.configs()]
    assert dump_index(Index(table, got_extra)) == dump_index(index)


def test_cut_compact_file_is_refused(tmp_path: Any) -> None:
    shards = [_shard(i, 0, "zstd", ["sha1"], 5) for i in range(20)]
    index = parse_index(json.dumps({"shards": shards, "version": 2}).encode(), "x")
    blob = index.table.to_compact({"digest": "d"}, {})
    assert blob is not None
    path = os.path.join(str(tmp_path), "c")
    for cut in (len(blob) - 1, len(blob) // 2):
        with open(path, "wb") as f:
            f.write(blob[:cut])
        with pytest.raises(ValueError):
            from_compact(path, _templates)
