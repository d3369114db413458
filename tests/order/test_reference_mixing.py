"""Streams weighed relatively (``proportion``, with or without ``epoch_size``), or unweighted
streams given an ``epoch_size``, under every reference shuffle algorithm: the samples a
``StreamingDataset`` yields over two epochs are the reference's, sample for sample, and so are
each ``Stream``'s resolved ``choose``, the epoch and position of a checkpoint halfway through epoch
1 and the rest of that epoch after it. The ``EMPTY`` cases' epochs are too small for one batch of
a stream (the reference yields nothing, or refuses).

The golden file is the reference's own ``StreamingDataset`` over the same three streams
(``scripts/gen_mosaic_mixing_golden.py``). The reference splits the epoch over the streams with
a seeded draw (``Stream.apply_weights``): the streams that get the samples rounding leaves over
are drawn by ``default_rng(shuffle_seed)``. astream split them by largest remainder, so in 12
of 150 such cases drawn at random the epoch held one sample more of one stream and one less of
another, and every later draw differed.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest

from astream import MDSWriter, Stream, StreamingDataset
from astream.errors import ConfigError
from scripts.gen_mosaic_mixing_golden import write_streams

GOLDEN = json.loads((Path(__file__).parent / "golden" / "mosaic" / "mixing.json").read_text())
CASES = list(enumerate(GOLDEN["cases"]))


@pytest.fixture(scope="module")
def streams(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    written = write_streams(str(tmp_path_factory.mktemp("mixing")), MDSWriter, GOLDEN["shards"])
    return {name: path for name, (path, _shards) in written.items()}


def _id(case: tuple[int, dict[str, Any]]) -> str:
    k, c = case
    weights = "+".join(f"{s['name']}{s.get('proportion', '')}" for s in c["streams"])
    return f"{k}-{c['shuffle_algo']}-{c['batching_method']}-{weights}-e{c.get('epoch_size')}"


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_mixed_epochs_as_the_reference(
    streams: dict[str, str], case: tuple[int, dict[str, Any]]
) -> None:
    _, c = case
    kw = {
        k: v
        for k, v in c.items()
        if k not in ("streams", "epochs", "error", "choose", "resumed", "state")
    }
    objs = [Stream(local=streams[s["name"]], proportion=s.get("proportion")) for s in c["streams"]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if "error" in c:
            with pytest.raises(ConfigError):
                ds = StreamingDataset(streams=objs, **kw)
                [s["id"] for s in ds]
            return
        ds = StreamingDataset(streams=objs, **kw)
        got = [[int(s["id"]) for s in ds] for _ in range(2)]
    assert [o.choose for o in objs] == c["choose"]  # each stream's share, as resolved there
    assert got == c["epochs"]
    # a checkpoint halfway through epoch 1, resumed by a new dataset: the reference's rest
    half, rest = c["resumed"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        state = ds.state_dict(half, True)
        assert [state["epoch"], state["sample_in_epoch"]] == c["state"]
        again = StreamingDataset(streams=objs, **kw)
        again.load_state_dict(state)
        assert [int(s["id"]) for s in again] == rest
