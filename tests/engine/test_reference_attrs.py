"""The reference's attributes of a ``StreamingDataset`` (``ds.shuffle_seed``,
``ds.num_canonical_nodes``, ``ds.samples_per_shard``...): astream shows what the reference
shows, built, after an iteration and after loading a checkpoint; and an assignment the reference
would act on is refused rather than ignored.

The golden file is the reference's own ``StreamingDataset`` over the mixing golden's three
streams (``scripts/gen_mosaic_attrs_golden.py``). The reference fills ``num_canonical_nodes``
and ``shuffle_block_size`` in at its first iteration (None before); astream resolves them when
the dataset is built, so its values right after construction are compared with the reference's
after an iteration (docs/migrating.md).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from astream import MDSWriter, Stream, StreamingDataset
from astream.core.order import default_block_size
from astream.errors import AstreamError, SettingError
from scripts.gen_mosaic_attrs_golden import ARRAYS, COUNTS, SETTINGS
from scripts.gen_mosaic_mixing_golden import write_streams

GOLDEN = json.loads((Path(__file__).parent / "golden" / "mosaic_attrs.json").read_text())
CASES = list(enumerate(GOLDEN["cases"]))


@pytest.fixture(scope="module")
def streams(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    written = write_streams(str(tmp_path_factory.mktemp("attrs")), MDSWriter, GOLDEN["shards"])
    return {name: path for name, (path, _shards) in written.items()}


def _build(streams: dict[str, str], case: dict[str, Any], **extra: Any) -> StreamingDataset:
    parts = [
        Stream(local=streams[s["name"]], **{k: v for k, v in s.items() if k != "name"})
        for s in case["streams"]
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return StreamingDataset(streams=parts, **case["kw"], **extra)


def _seen(ds: Any, names: tuple[str, ...]) -> dict[str, Any]:
    got = {}
    for n in names:
        v = getattr(ds, n)
        got[n] = v.tolist() if isinstance(v, np.ndarray) else v
    return got


def _expected(ds: Any, golden: dict[str, Any], case: dict[str, Any]) -> dict[str, Any]:
    """The reference's settings, but for ``predownload`` left unset: the reference's default (8
    x ``batch_size``), or an average shard's samples where that is more (astream's own rule,
    docs/migrating.md: planning less than a shard ahead would fetch a shard per sample)."""
    want = dict(golden)
    if "predownload" not in case["kw"]:
        want["predownload"] = max(golden["predownload"], ds.num_samples // ds.num_shards)
    return want


def _id(case: tuple[int, dict[str, Any]]) -> str:
    k, c = case
    names = "+".join(s["name"] for s in c["streams"])
    return f"{k}-{c['kw'].get('shuffle_algo')}-{names}"


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_attributes_as_the_reference(streams: dict[str, str], case: tuple[int, Any]) -> None:
    _, c = case
    if "error" in c:  # the reference refuses it when built: so does astream, typed
        with pytest.raises(AstreamError) as got:
            _build(streams, c)
        assert isinstance(got.value, ValueError), got.value
        return
    ds = _build(streams, c)
    assert isinstance(ds.cache_usage, int)
    # resolved when built: the reference's values after its first iteration
    assert _seen(ds, SETTINGS) == _expected(ds, c["iterated"], c)
    arrays = _seen(ds, ARRAYS + COUNTS)
    assert arrays == {k: c["built"][k] for k in ARRAYS + COUNTS}
    for name in ARRAYS:
        assert getattr(ds, name).dtype == np.int64, name
    for _ in ds:
        pass
    assert _seen(ds, SETTINGS) == _expected(ds, c["iterated"], c)
    again = _build(streams, c)
    again.load_state_dict(dict(GOLDEN["checkpoint"]))
    state = again.state_dict(0, True)
    assert _seen(again, SETTINGS) == _expected(again, c["resumed"]["attrs"], c)
    assert {k: state[k] for k in c["resumed"]["state"]} == c["resumed"]["state"]


def test_astream_order_shows_its_own_defaults(streams: dict[str, str]) -> None:
    """Under astream's own algorithm: one canonical node and 4 median shards per block."""
    kw = {"batch_size": 4, "shuffle_algo": "astream"}
    ds = _build(streams, {"streams": [{"name": "a"}, {"name": "c"}], "kw": kw})
    assert (ds.shuffle_algo, ds.num_canonical_nodes) == ("astream", 1)
    sizes = [np.array(GOLDEN["shards"][n], np.int64) for n in ("a", "c")]
    assert ds.shuffle_block_size == default_block_size(sizes) == 4096
    assert ds.initial_physical_nodes is None
    ds.load_state_dict(dict(GOLDEN["checkpoint"], num_canonical_nodes=1))
    # a checkpoint's first World is kept for the checkpoints this run writes, as the reference
    assert ds.initial_physical_nodes == 2
    assert ds.state_dict(0, True)["initial_physical_nodes"] == 2


def test_assigning_another_setting_is_refused(streams: dict[str, str]) -> None:
    case = {"streams": [{"name": "a"}], "kw": {"batch_size": 4, "shuffle": True}}
    ds = _build(streams, case)
    first = [s["id"] for s in ds]
    ds.shuffle_seed = 9176  # the value it has: nothing to refuse
    ds.cache_limit = None
    with pytest.raises(
        SettingError,
        match=r"shuffle_seed = 7: the dataset was built with "
        r"shuffle_seed=9176.*pass shuffle_seed= to StreamingDataset\(\.\.\.\) "
        r"\(or load a checkpoint holding it",
    ):
        ds.shuffle_seed = 7
    with pytest.raises(AttributeError, match="shuffle = False"):  # also an AttributeError
        ds.shuffle = False
    with pytest.raises(SettingError, match=r"cache_limit = '1mb': .*cache_limit=None"):
        ds.cache_limit = "1mb"
    with pytest.raises(SettingError, match="cannot be deleted"):
        del ds.shuffle_algo
    assert (ds.shuffle_seed, ds.shuffle) == (9176, True)
    # the refusals changed nothing: the next epoch is the one that seed plans
    fresh = _build(streams, case)
    next(iter(fresh))
    assert [s["id"] for s in ds] == [s["id"] for s in fresh] != first


def test_a_subclass_setting_before_init_is_checked(streams: dict[str, str]) -> None:
    class Same(StreamingDataset):
        def __init__(self, **kw: Any) -> None:
            self.shuffle = True
            self.shuffle_seed = 5
            super().__init__(shuffle=True, shuffle_seed=5, **kw)

    class Other(StreamingDataset):
        def __init__(self, **kw: Any) -> None:
            self.shuffle_seed = 5
            super().__init__(shuffle=True, shuffle_seed=6, **kw)

    ok = Same(local=streams["a"], batch_size=4)
    assert (ok.shuffle, ok.shuffle_seed) == (True, 5)
    assert "_presets" not in vars(ok)
    with pytest.raises(
        SettingError,
        match=r"shuffle_seed = 5 \(assigned before __init__\): "
        r"the dataset was built with shuffle_seed=6",
    ):
        Other(local=streams["b"], batch_size=4)


@pytest.mark.parametrize("algo", ["astream", "py1e"])
def test_a_checkpoint_with_another_seed_replans_a_planned_epoch(
    streams: dict[str, str], algo: str
) -> None:
    """A dataset that already planned its epoch (``len()``) and then loads a checkpoint holding
    another seed and canonical nodes resumes the checkpoint's order, not its own planned one;
    a checkpoint that changes only ``initial_physical_nodes`` under astream's order (which never
    reads it) keeps the plan it has."""
    case = {"streams": [{"name": "a"}, {"name": "c"}], "kw": {"batch_size": 4, "shuffle": True}}
    case["kw"]["shuffle_algo"] = algo
    theirs = _build(streams, case, shuffle_seed=77, num_canonical_nodes=2)
    want = [s["id"] for s in theirs][20:]
    state = theirs.state_dict(20, True)
    mine = _build(streams, case, shuffle_seed=5, num_canonical_nodes=1)
    assert len(mine) == len(want) + 20  # epoch 0 planned under seed 5
    mine.load_state_dict(state)
    assert [s["id"] for s in mine] == want
    if algo == "astream":
        same = _build(streams, case)
        len(same)
        kept = same._plans.copy()
        same.load_state_dict(dict(same.state_dict(0, True), initial_physical_nodes=3))
        assert same.initial_physical_nodes == 3 and same._plans == kept
