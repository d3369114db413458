"""Error situations shared by the reference (golden generation) and astream (the test).

Each case is a function ``case(api, tmp)`` that sets a situation up under the empty directory
``tmp`` with the library in ``api`` and does the one thing that should fail. The same code runs
under mosaicml-streaming (scripts/gen_compat_golden.py records what it raises into
tests/core/compat_golden.json) and under astream (tests/core/test_errors_compat.py checks that
astream raises a subclass of the same built-in types).

``api`` has: ``StreamingDataset``, ``Stream``, ``MDSWriter``, ``name`` ("streaming"/"astream").
No case relies on ``local=None`` (the reference invents a temp dir there, and fails when it
exists; astream does not), except ``stream_without_location``, which keeps that dir in ``tmp``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

# The built-in types a caller written for the reference may catch. A raised exception is
# described by the subset of these it is an instance of.
BUILTINS: dict[str, type[BaseException]] = {
    "ValueError": ValueError,
    "TypeError": TypeError,
    "KeyError": KeyError,
    "RuntimeError": RuntimeError,
    "OSError": OSError,
    "FileNotFoundError": FileNotFoundError,
    "FileExistsError": FileExistsError,
    "PermissionError": PermissionError,
    "JSONDecodeError": json.JSONDecodeError,
}

COLUMNS = {"id": "int", "text": "str"}


def write(api: Any, out: str, n: int = 20, **kw: Any) -> str:
    """A small MDS dataset of ``n`` samples under ``out``."""
    kw.setdefault("size_limit", 1 << 10)
    with api.MDSWriter(out=out, columns=kw.pop("columns", COLUMNS), **kw) as w:
        for i in range(n):
            w.write({"id": i, "text": f"sample {i:04d} " + "x" * (i % 7)})
    return out


def _index(path: str) -> dict[str, Any]:
    with open(os.path.join(path, "index.json")) as f:
        return json.load(f)  # type: ignore[no-any-return]


def _set_index(path: str, obj: Any) -> None:
    with open(os.path.join(path, "index.json"), "w") as f:
        json.dump(obj, f)


def _ds(api: Any, **kw: Any) -> Any:
    kw.setdefault("batch_size", 4)
    return api.StreamingDataset(**kw)


def _data(api: Any, tmp: str, name: str = "data", **kw: Any) -> str:
    return write(api, os.path.join(tmp, name), **kw)


# -- argument values ---------------------------------------------------------------------------
def streams_and_remote(api: Any, tmp: str) -> Any:
    d = _data(api, tmp)
    return _ds(api, streams=[api.Stream(local=d)], local=d)


def no_location(api: Any, tmp: str) -> Any:
    return _ds(api)


def bad_sampling_method(api: Any, tmp: str) -> Any:
    return _ds(api, local=_data(api, tmp), sampling_method="bogus")


def bad_batching_method(api: Any, tmp: str) -> Any:
    return _ds(api, local=_data(api, tmp), batching_method="bogus")


def zero_sampling_granularity(api: Any, tmp: str) -> Any:
    return _ds(api, local=_data(api, tmp), sampling_granularity=0)


def negative_shuffle_seed(api: Any, tmp: str) -> Any:
    return _ds(api, local=_data(api, tmp), shuffle_seed=-1)


def negative_epoch_size(api: Any, tmp: str) -> Any:
    return _ds(api, local=_data(api, tmp), epoch_size="-5k")


def unparsable_epoch_size(api: Any, tmp: str) -> Any:
    return _ds(api, local=_data(api, tmp), epoch_size="lots")


def unparsable_cache_limit(api: Any, tmp: str) -> Any:
    return _ds(api, local=_data(api, tmp), cache_limit="lots")


def cache_limit_below_shard(api: Any, tmp: str) -> Any:
    d = _data(api, tmp)
    return _ds(api, remote=d, local=os.path.join(tmp, "cache"), cache_limit=100)


def stream_negative_proportion(api: Any, tmp: str) -> Any:
    return api.Stream(local=tmp, proportion=-1.0)


def stream_negative_repeat(api: Any, tmp: str) -> Any:
    return api.Stream(local=tmp, repeat=-1.0)


def stream_negative_choose(api: Any, tmp: str) -> Any:
    return api.Stream(local=tmp, choose=-1)


def stream_two_weights(api: Any, tmp: str) -> Any:
    return api.Stream(local=tmp, proportion=0.5, repeat=2.0)


def stream_negative_retry(api: Any, tmp: str) -> Any:
    return api.Stream(local=tmp, download_retry=-1)


def stream_zero_timeout(api: Any, tmp: str) -> Any:
    return api.Stream(local=tmp, download_timeout=0)


def stream_without_location(api: Any, tmp: str) -> Any:
    # an absolute split keeps the reference's invented temp dir (gettempdir()/""/split) in tmp
    return _ds(api, streams=[api.Stream(split=os.path.join(tmp, "x"))])


def mixed_relative_absolute(api: Any, tmp: str) -> Any:
    a, b = _data(api, tmp, "a"), _data(api, tmp, "b")
    return _ds(api, streams=[api.Stream(local=a, proportion=0.5), api.Stream(local=b, repeat=2)])


def epoch_size_with_absolute(api: Any, tmp: str) -> Any:
    a, b = _data(api, tmp, "a"), _data(api, tmp, "b")
    return _ds(api, streams=[api.Stream(local=a, repeat=2), api.Stream(local=b)], epoch_size=100)


# -- missing and malformed data --------------------------------------------------------------
def missing_local_dir(api: Any, tmp: str) -> Any:
    return _ds(api, local=os.path.join(tmp, "nowhere"))


def missing_remote_index(api: Any, tmp: str) -> Any:
    remote = os.path.join(tmp, "remote")
    os.makedirs(remote)
    return _ds(api, remote=remote, local=os.path.join(tmp, "cache"))


def corrupt_index_json(api: Any, tmp: str) -> Any:
    d = _data(api, tmp)
    with open(os.path.join(d, "index.json"), "w") as f:
        f.write('{"shards": [')
    return _ds(api, local=d)


def index_without_shards_key(api: Any, tmp: str) -> Any:
    d = _data(api, tmp)
    _set_index(d, {"version": 2})
    return _ds(api, local=d)


def index_bad_version(api: Any, tmp: str) -> Any:
    d = _data(api, tmp)
    obj = _index(d)
    obj["version"] = 99
    _set_index(d, obj)
    return _ds(api, local=d)


def index_unknown_encoding(api: Any, tmp: str) -> Any:
    d = _data(api, tmp)
    obj = _index(d)
    for shard in obj["shards"]:
        shard["column_encodings"] = ["int", "no_such_encoding"]
    _set_index(d, obj)
    return _ds(api, local=d)


def index_unknown_format(api: Any, tmp: str) -> Any:
    d = _data(api, tmp)
    obj = _index(d)
    for shard in obj["shards"]:
        shard["format"] = "parquet9"
    _set_index(d, obj)
    return _ds(api, local=d)


def empty_dataset(api: Any, tmp: str) -> Any:
    d = os.path.join(tmp, "empty")
    with api.MDSWriter(out=d, columns=COLUMNS):
        pass
    return _ds(api, local=d)


def pkl_without_allow_unsafe(api: Any, tmp: str) -> Any:
    d = os.path.join(tmp, "pkl")
    with api.MDSWriter(out=d, columns={"obj": "pkl"}) as w:
        for i in range(4):
            w.write({"obj": {"i": i}})
    return _ds(api, local=d)


def missing_shard_file(api: Any, tmp: str) -> Any:
    d = _data(api, tmp)
    os.unlink(os.path.join(d, _index(d)["shards"][0]["raw_data"]["basename"]))
    return list(_ds(api, local=d))


def corrupt_shard_hash(api: Any, tmp: str) -> Any:
    remote = _data(api, tmp, "remote", hashes=["sha1"])
    name = _index(remote)["shards"][0]["raw_data"]["basename"]
    path = os.path.join(remote, name)
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) - 1)
        last = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([last[0] ^ 0xFF]))
    ds = _ds(api, remote=remote, local=os.path.join(tmp, "cache"), validate_hash="sha1")
    return list(ds)


# -- the writer ----------------------------------------------------------------------------------
def writer_nonempty_out(api: Any, tmp: str) -> Any:
    d = os.path.join(tmp, "out")
    os.makedirs(d)
    with open(os.path.join(d, "keep.txt"), "w") as f:
        f.write("x")
    return api.MDSWriter(out=d, columns=COLUMNS)


def writer_unknown_encoding(api: Any, tmp: str) -> Any:
    return api.MDSWriter(out=os.path.join(tmp, "out"), columns={"a": "no_such_encoding"})


def writer_unknown_compression(api: Any, tmp: str) -> Any:
    return api.MDSWriter(out=os.path.join(tmp, "out"), columns=COLUMNS, compression="nope")


def writer_unknown_hash(api: Any, tmp: str) -> Any:
    return api.MDSWriter(out=os.path.join(tmp, "out"), columns=COLUMNS, hashes=["nope"])


def writer_negative_size_limit(api: Any, tmp: str) -> Any:
    return api.MDSWriter(out=os.path.join(tmp, "out"), columns=COLUMNS, size_limit=-1)


def writer_wrong_sample_type(api: Any, tmp: str) -> Any:
    with api.MDSWriter(out=os.path.join(tmp, "out"), columns=COLUMNS) as w:
        w.write({"id": "not an int", "text": "t"})


def writer_missing_column(api: Any, tmp: str) -> Any:
    with api.MDSWriter(out=os.path.join(tmp, "out"), columns=COLUMNS) as w:
        w.write({"id": 1})


CASES: dict[str, Callable[[Any, str], Any]] = {
    name: fn
    for name, fn in list(globals().items())
    if callable(fn)
    and not name.startswith("_")
    and name not in ("write", "describe", "run_case")
    and getattr(fn, "__module__", None) == __name__
}


def describe(exc: BaseException | None) -> dict[str, Any]:
    if exc is None:
        return {"raised": None, "builtins": []}
    return {
        "raised": type(exc).__name__,
        "builtins": sorted(n for n, t in BUILTINS.items() if isinstance(exc, t)),
    }


def run_case(api: Any, name: str, tmp: str) -> tuple[BaseException | None, dict[str, Any]]:
    try:
        CASES[name](api, tmp)
    except Exception as exc:
        return exc, describe(exc)
    return None, describe(None)
