"""Invalid and edge arguments: astream refuses what the reference refuses, and yields what it
yields for the rest, except four values the reference takes silently and astream refuses.

The golden file is the reference's own ``StreamingDataset`` built and iterated once over the
mixing golden's streams (``scripts/gen_mosaic_refusals_golden.py``). Where the reference
refuses a configuration when a ``Stream`` or the dataset is built, astream's error is also an
instance of the same built-in type (code written for the reference catches it). Where the
reference only fails while iterating (a ``KeyError`` for an unknown algorithm, a
``ZeroDivisionError`` for ``batch_size=0``) or hangs (``predownload=-1``), astream refuses the
configuration when the dataset is built, with a ``ConfigError``.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from astream import MDSWriter, Stream, StreamingDataset
from astream.errors import ConfigError
from scripts.gen_mosaic_mixing_golden import write_streams
from scripts.gen_mosaic_refusals_golden import arguments

GOLDEN = json.loads((Path(__file__).parent / "golden" / "mosaic_refusals.json").read_text())
# the reference takes these silently; astream refuses them, naming the argument
# (docs/migrating.md, "Checked earlier" and "Upper bounds")
STRICTER = {
    "choose_fractional": "choose must be an int",
    "canonical_nodes_zero": "num_canonical_nodes must be >= 1",
    "validate_hash_unknown": "unsupported hash algorithm 'md5x'",
    "shuffle_not_a_bool": "shuffle must be True or False",
}

# refused while the reference iterates, with a type that is an accident of where it fails
# (docs/migrating.md): astream refuses them when the dataset is built, with a ValueError
OTHER_TYPE = {"batch_size_zero": "ZeroDivisionError"}


@pytest.fixture(scope="module")
def streams(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    written = write_streams(str(tmp_path_factory.mktemp("refusals")), MDSWriter, GOLDEN["shards"])
    return {name: path for name, (path, _shards) in written.items()}


def _run(streams: dict[str, str], case: str) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sum(1 for _ in StreamingDataset(**arguments(case, streams, Stream)))


@pytest.mark.parametrize("case", sorted(GOLDEN["cases"]))
def test_refused_and_accepted_as_the_reference(streams: dict[str, str], case: str) -> None:
    ref = GOLDEN["cases"][case]
    if case in STRICTER:
        assert "samples" in ref  # the reference takes it
        with pytest.raises(ConfigError, match=STRICTER[case]):
            _run(streams, case)
        return
    if "samples" in ref:
        assert _run(streams, case) == ref["samples"]
        return
    with pytest.raises(ConfigError) as got:
        _run(streams, case)
    if "error" in ref and case not in OTHER_TYPE:
        builtin = getattr(__import__("builtins"), ref["error"])
        assert isinstance(got.value, builtin), (ref, got.value)


def test_the_stricter_cases_are_the_reference_s_silent_ones() -> None:
    assert set(STRICTER) <= set(GOLDEN["cases"])
    refused = {k for k, v in GOLDEN["cases"].items() if "samples" not in v}
    assert not refused & set(STRICTER)
    assert GOLDEN["cases"]["predownload_negative"] == {"hang": "iter"}
    assert {k: GOLDEN["cases"][k].get("error") for k in OTHER_TYPE} == OTHER_TYPE
