"""MDSWriter's argument checks, its remote sink wiring and its progress bar, exactly.

- Every bounded argument (``size_limit``, ``max_workers``, ``retry``, ``progress_bar``) is
  accepted at both ends of its range and refused one past them (and as a bool, a float or a
  string) with a ConfigError whose whole message is checked.
- A remote ``out`` without ``sink_factory`` gets the storage layer's sink with every argument
  the writer was given (staging dir, ``keep_local``, ``max_workers`` as its upload concurrency,
  ``retry`` as its store's policy, ``exist_ok``); what lands on the S3 emulator is byte for byte
  what a local writer writes. Without the storage layer a remote ``out`` is a ConfigError and
  the staging dir it made is gone.
- ``get_config`` is the reference's dict, keys in its order; the progress bar counts samples
  and shards.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from astream.errors import ConfigError, OutputExistsError
from astream.storage import RetryPolicy
from astream.storage import sync as store_sync
from astream.writer.mds import MAX_UPLOAD_WORKERS, MDSWriter
from astream.writer.remote import RemoteSink

COLS = {"id": "int", "text": "str", "blob": "bytes"}
GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "data" / "multishard"


def _rows(n: int) -> list[dict[str, Any]]:
    return [
        {"id": i, "text": f"row {i} " * (i % 5), "blob": bytes([i % 251]) * (20 + i)}
        for i in range(n)
    ]


def _write(out: Any, rows: list[dict[str, Any]], **kw: Any) -> MDSWriter:
    w = MDSWriter(out=out, columns=COLS, **kw)
    with w:
        for r in rows:
            w.write(r)
    return w


def _sink(w: MDSWriter) -> Any:
    """The writer's sink (its attributes are the storage layer's, not ShardSink's)."""
    return w._sink


def _files(root: str) -> dict[str, bytes]:
    out = {}
    for name in sorted(os.listdir(root)):
        with open(os.path.join(root, name), "rb") as f:
            out[name] = f.read()
    return out


# --- argument bounds -------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [True, 1.5, "3", 0, -1, MAX_UPLOAD_WORKERS + 1])
def test_max_workers_refused_outside_its_range(tmp_path: Path, bad: Any) -> None:
    with pytest.raises(ConfigError) as e:
        MDSWriter(out=str(tmp_path / "o"), columns=COLS, max_workers=bad)
    assert str(e.value) == (
        f"max_workers (concurrent uploads) must be an int in 1..{MAX_UPLOAD_WORKERS}, got {bad!r}"
    )
    assert not os.path.exists(tmp_path / "o")  # checked before anything is made


@pytest.mark.parametrize("good", [1, MAX_UPLOAD_WORKERS])
def test_max_workers_accepted_at_both_ends(tmp_path: Path, good: int) -> None:
    w = _write(str(tmp_path / "o"), _rows(3), max_workers=good)
    assert [s.samples for s in w.shards] == [3]


@pytest.mark.parametrize("bad", [1, 0, None, "yes"])
def test_progress_bar_must_be_a_bool(tmp_path: Path, bad: Any) -> None:
    with pytest.raises(ConfigError) as e:
        MDSWriter(out=str(tmp_path / "o"), columns=COLS, progress_bar=bad)
    assert str(e.value) == f"progress_bar must be True or False, got {bad!r}"


@pytest.mark.parametrize("bad", [True, False, 1.0, "2", -1, 101])
def test_retry_refused_outside_its_range_even_for_a_local_out(tmp_path: Path, bad: Any) -> None:
    with pytest.raises(ConfigError) as e:
        MDSWriter(out=str(tmp_path / "o"), columns=COLS, retry=bad)
    assert str(e.value) == f"retry must be an int in 0..100 or a RetryPolicy, got {bad!r}"


@pytest.mark.parametrize("good", [0, 100, RetryPolicy(attempts=2)])
def test_retry_accepted_for_a_local_out(tmp_path: Path, good: Any) -> None:
    w = _write(str(tmp_path / "o"), _rows(2), retry=good)
    assert sorted(os.listdir(tmp_path / "o")) == ["index.json", "shard.00000.mds"]
    assert w.remote is None


@pytest.mark.parametrize("bad", [-1, 1 << 32, "4gb"])
def test_size_limit_refused_outside_u32(tmp_path: Path, bad: Any) -> None:
    with pytest.raises(ConfigError) as e:
        MDSWriter(out=str(tmp_path / "o"), columns=COLS, size_limit=bad)
    got = 1 << 32 if bad == "4gb" else bad
    assert str(e.value) == (
        f"`size_limit` must be less than 2**32 and not negative (u32 offsets), got {got}"
    )


@pytest.mark.parametrize("no_limit", [None, 0, "0", "0b"])
def test_a_zero_size_limit_means_one_shard(tmp_path: Path, no_limit: Any) -> None:
    w = _write(str(tmp_path / "o"), _rows(40), size_limit=no_limit)
    assert w.size_limit is None
    assert [s.samples for s in w.shards] == [40]
    with open(tmp_path / "o" / "index.json") as f:
        assert json.load(f)["shards"][0]["size_limit"] is None


def test_the_largest_u32_size_limit_is_kept(tmp_path: Path) -> None:
    w = _write(str(tmp_path / "o"), _rows(3), size_limit=(1 << 32) - 1)
    assert w.size_limit == (1 << 32) - 1
    assert w.get_config()["size_limit"] == (1 << 32) - 1


# --- get_config ------------------------------------------------------------------------------


def test_get_config_is_the_references_dict_in_its_key_order(tmp_path: Path) -> None:
    # the reference's index.json shard entry carries the same fields as its get_config
    with open(GOLDEN / "index.json") as f:
        ref = json.load(f)["shards"][0]
    columns = dict(zip(ref["column_names"], ref["column_encodings"]))
    w = MDSWriter(out=str(tmp_path / "o"), columns=columns, hashes=ref["hashes"],
                  size_limit=ref["size_limit"])  # fmt: skip
    cfg = w.get_config()
    w.finish()
    assert list(cfg) == [
        "version", "format", "compression", "hashes", "size_limit",
        "column_names", "column_encodings", "column_sizes",
    ]  # fmt: skip
    assert cfg == {"version": 2, **{k: ref[k] for k in list(cfg)[1:]}}
    assert all(type(cfg[k]) is list for k in ("hashes", "column_names", "column_encodings",
                                              "column_sizes"))  # fmt: skip
    cfg["hashes"].append("md5")  # a copy: the writer's own list is untouched
    cfg["column_names"].append("x")
    assert w.get_config()["hashes"] == ref["hashes"]
    assert w.get_config()["column_names"] == ref["column_names"]


def test_get_config_with_compression(tmp_path: Path) -> None:
    # columns sorted by name, as the reference sorts them
    w = MDSWriter(out=str(tmp_path / "o"), columns={"b": "bytes", "a": "int"},
                  compression="zstd:3", size_limit="1kb")  # fmt: skip
    assert w.get_config() == {
        "version": 2, "format": "mds", "compression": "zstd:3", "hashes": [],
        "size_limit": 1024, "column_names": ["a", "b"], "column_encodings": ["int", "bytes"],
        "column_sizes": [8, None],
    }  # fmt: skip
    w.finish()


# --- the progress bar ------------------------------------------------------------------------


def test_progress_bar_counts_samples_and_shards(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TQDM_MININTERVAL", "1000")  # only explicit refreshes draw the bar
    out = str(tmp_path / "o")
    w = _write(out, _rows(30), size_limit=600, progress_bar=True)
    n = len(w.shards)
    assert n >= 3
    err = capsys.readouterr().err
    draws = [d for d in err.split("\r") if d.strip()]
    # drawn when opened and when closed: a shard's postfix waits for the next draw
    assert len(draws) == 2, draws
    assert draws[0].startswith(f"MDSWriter {out}: 0 samples")
    assert draws[-1].startswith(f"MDSWriter {out}: 30 samples")
    assert draws[-1].rstrip().endswith(f"shards={n}]")


def test_no_progress_bar_draws_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write(str(tmp_path / "o"), _rows(5), size_limit=300)
    assert capsys.readouterr().err == ""


# --- sinks given by sink_factory -------------------------------------------------------------


class MovingSink:
    """A sink that moves the whole staged dataset to ``dest`` when it finishes (the staging
    directory is then gone before the writer cleans it up)."""

    def __init__(self, dest: str, local: str) -> None:
        self.dest = dest
        self.local = local

    def shard_done(self, path: str, key: str) -> None:
        pass

    def check(self) -> None:
        pass

    def finish(self, index_path: str) -> None:
        shutil.move(self.local, self.dest)

    def close(self) -> None:
        pass


def test_a_sink_may_take_the_staging_dir_away(tmp_path: Path) -> None:
    dest = str(tmp_path / "moved")
    rows = _rows(12)
    w = _write("s3://bucket/moved", rows, size_limit=500,
               sink_factory=lambda remote, local, keep: MovingSink(dest, local))  # fmt: skip
    assert not os.path.exists(w.local)
    _write(str(tmp_path / "plain"), rows, size_limit=500)
    assert _files(dest) == _files(str(tmp_path / "plain"))


class KeepingSink(MovingSink):
    def finish(self, index_path: str) -> None:
        pass


@pytest.mark.parametrize("keep_local", [True, False])
def test_keep_local_keeps_the_staging_dir(tmp_path: Path, keep_local: bool) -> None:
    rows = _rows(12)
    got: list[tuple[str, str, bool]] = []

    def factory(remote: str, local: str, keep: bool) -> KeepingSink:
        got.append((remote, local, keep))
        return KeepingSink("", local)

    w = _write("gs://bucket/kept", rows, size_limit=500, keep_local=keep_local,
               sink_factory=factory)  # fmt: skip
    assert got == [("gs://bucket/kept", w.local, keep_local)]
    assert w.remote == "gs://bucket/kept" and w.keep_local is keep_local
    if not keep_local:
        assert not os.path.exists(w.local)
        return
    _write(str(tmp_path / "plain"), rows, size_limit=500)
    try:
        assert _files(w.local) == _files(str(tmp_path / "plain"))
    finally:
        shutil.rmtree(w.local)


class PreparedSink(KeepingSink):
    def __init__(self, local: str, fail: bool) -> None:
        super().__init__("", local)
        self.fail = fail
        self.calls: list[str] = []

    def prepare(self) -> None:
        self.calls.append("prepare")
        if self.fail:
            raise OutputExistsError("prefix taken")

    def close(self) -> None:
        self.calls.append("close")


def test_a_sink_is_prepared_in_the_constructor_and_closed_if_that_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    sinks: list[PreparedSink] = []

    def factory(fail: bool) -> Any:
        def make(remote: str, local: str, keep: bool) -> PreparedSink:
            sinks.append(PreparedSink(local, fail))
            return sinks[-1]

        return make

    w = MDSWriter(out="s3://b/p", columns=COLS, sink_factory=factory(False))
    assert sinks[0].calls == ["prepare"]
    w.finish()
    assert sinks[0].calls == ["prepare", "close"]
    with pytest.raises(OutputExistsError, match="prefix taken"):
        MDSWriter(out="s3://b/p", columns=COLS, sink_factory=factory(True))
    assert sinks[1].calls == ["prepare", "close"]
    assert os.listdir(tmp_path) == []  # both staging dirs removed


# --- the storage layer's sink ----------------------------------------------------------------


def test_without_the_storage_layer_a_remote_out_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    monkeypatch.setitem(sys.modules, "astream.writer.remote", None)  # import fails
    with pytest.raises(ConfigError) as e:
        MDSWriter(out="s3://bucket/ds", columns=COLS)
    assert str(e.value) == "remote output needs the storage layer"
    assert e.value.__cause__ is None and e.value.__suppress_context__
    assert os.listdir(tmp_path) == []  # the staging dir it made is removed


def _url(bucket: str) -> str:
    return f"{bucket}/mut-{uuid.uuid4().hex[:8]}"


def _check_remote_equals_local(url: str, rows: list[dict[str, Any]], tmp_path: Path,
                               **kw: Any) -> None:  # fmt: skip
    store_sync.download(url, str(tmp_path / "down"))
    _write(str(tmp_path / "plain"), rows, **kw)
    assert _files(str(tmp_path / "down")) == _files(str(tmp_path / "plain"))


def test_remote_sink_gets_every_argument(s3_bucket: str, tmp_path: Path) -> None:
    url = _url(s3_bucket)
    rows = _rows(25)
    w = MDSWriter(out=url, columns=COLS, size_limit=700, max_workers=3, retry=2,
                  keep_local=True, hashes=["sha1"])  # fmt: skip
    sink: Any = w._sink
    assert isinstance(sink, RemoteSink)
    assert (sink.remote_url, sink.local_dir, sink.remove_local) == (url, w.local, False)
    assert sink._max == 3
    assert _sink(w).store.policy.attempts == 3  # retry=2: two retries after the first try
    with w:
        for r in rows:
            w.write(r)
    try:
        assert sink.uploaded[-1] == "index.json"
        _check_remote_equals_local(url, rows, tmp_path, size_limit=700, hashes=["sha1"])
        assert _files(w.local) == _files(str(tmp_path / "plain"))  # kept
    finally:
        shutil.rmtree(w.local)


@pytest.mark.parametrize("retry", [0, 100])
def test_remote_retry_is_tries_after_the_first(s3_bucket: str, retry: int) -> None:
    w = MDSWriter(out=_url(s3_bucket), columns=COLS, retry=retry)
    try:
        assert _sink(w).store.policy.attempts == retry + 1
    finally:
        w._close()


def test_remote_defaults_and_a_retry_policy_as_is(s3_bucket: str, tmp_path: Path) -> None:
    w = MDSWriter(out=_url(s3_bucket), columns=COLS)
    assert _sink(w)._max == 8 and _sink(w).store.policy == RetryPolicy()
    assert _sink(w).remove_local is True
    w.finish()
    assert not os.path.exists(w.local)  # staging removed
    policy = RetryPolicy(attempts=7, timeout=9.0)
    w = MDSWriter(out=_url(s3_bucket), columns=COLS, retry=policy)
    assert _sink(w).store.policy is policy
    w._close()


def test_remote_exist_ok_reaches_the_sink(s3_bucket: str, tmp_path: Path) -> None:
    url = _url(s3_bucket)
    _write(url, _rows(10), size_limit=400)
    with pytest.raises(OutputExistsError) as e:
        MDSWriter(out=url, columns=COLS)
    assert url in str(e.value)
    rows = _rows(4)
    _write(url, rows, exist_ok=True)
    _check_remote_equals_local(url, rows, tmp_path)


def test_out_that_is_a_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "taken"
    path.write_bytes(b"x")
    with pytest.raises(ConfigError) as e:
        MDSWriter(out=str(path), columns=COLS)
    assert str(e.value) == f"out: {str(path)!r} exists and is not a directory"
    assert path.read_bytes() == b"x"


def test_a_remote_out_stages_in_a_named_temp_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    w = MDSWriter(out="s3://b/p", columns=COLS, keep_local=True,
                  sink_factory=lambda remote, local, keep: KeepingSink("", local))  # fmt: skip
    w.finish()
    assert os.path.dirname(w.local) == str(tmp_path)
    assert os.path.basename(w.local).startswith("astream-writer-")
    assert sorted(os.listdir(w.local)) == ["index.json"]


def test_a_failed_prepare_that_took_the_staging_dir_keeps_its_error(tmp_path: Path) -> None:
    class Vanishing(PreparedSink):
        def prepare(self) -> None:
            shutil.rmtree(self.local)
            raise OutputExistsError("prefix taken")

    with pytest.raises(OutputExistsError, match="prefix taken"):
        MDSWriter(out="s3://b/p", columns=COLS,
                  sink_factory=lambda remote, local, keep: Vanishing(local, True))  # fmt: skip
