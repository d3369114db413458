"""A cache directory is bound to the dataset it holds (issue 12: "nothing lost, nothing wrong").

Two datasets with the same shard names and sizes pointed at one ``local`` used to share bytes
silently: the second served the first one's shards. Now ``local/.astream/binding.json`` records
the remote and the sha256 of its index; a different remote is refused at
construction, a legitimately changed index re-binds (and drops the shards that changed).
Remotes here are plain directories (the local ObjectStore): the binding logic is the same for
every backend, and the S3 path is exercised by tests/engine/test_offline.py.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from astream import MDSWriter, StreamingDataset
from astream.errors import ConfigError
from astream.runtime.binding import BINDING, ENTRY_MARK, index_digest, read_binding
from astream.runtime.index_load import INDEX

from .conftest import check_samples, write_ds

N = 120


def write_tagged(path: str, tag: int, n: int = N, hashes: list[str] | None = None) -> str:
    """``n`` samples whose shard names and sizes do not depend on ``tag``; the bytes do."""
    with MDSWriter(
        out=path, columns={"data": "bytes", "id": "int"}, size_limit=4_000, hashes=hashes
    ) as w:
        for i in range(n):
            w.write({"id": i, "data": bytes([tag, i % 256]) * 50})
    return path


def files_of(path: str) -> dict[str, bytes]:
    out = {}
    for d, dirs, names in os.walk(path):
        dirs[:] = [x for x in dirs if x != ".astream"]
        for n in names:
            p = os.path.join(d, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, path)] = f.read()
    return out


def tags(ds: StreamingDataset) -> set[int]:
    return {bytes(s["data"])[0] for s in ds}


def test_two_datasets_one_local_is_refused_not_mixed(tmp_path):
    a = write_tagged(str(tmp_path / "a"), 1)
    b = write_tagged(str(tmp_path / "b"), 2)
    assert {k: len(v) for k, v in files_of(a).items()} == {
        k: len(v) for k, v in files_of(b).items()
    }  # the trap: same names, same sizes
    local = str(tmp_path / "cache")
    ds_a = StreamingDataset(remote=a, local=local, batch_size=8)
    assert tags(ds_a) == {1}
    with pytest.raises(ConfigError) as e:
        StreamingDataset(remote=b, local=local, batch_size=8)
    assert str(e.value) == (
        f"local={local!r} is the cache of {a}; it cannot also hold {b}: give this dataset its "
        f"own `local` (or leave local=None: one directory per remote), or delete {local} if "
        f"the cache of {a} is no longer needed"
    )
    assert tags(ds_a) == {1} and ds_a[5]["data"] == bytes([1, 5]) * 50
    # the binding records the remote and the digest of the index it holds
    with open(os.path.join(local, INDEX), "rb") as f:
        idx = f.read()
    bound = read_binding(local)
    assert bound is not None
    assert (bound.remote, bound.digest) == (a, index_digest(idx))
    # a dataset of its own: fine
    ds_b = StreamingDataset(remote=b, local=str(tmp_path / "cache-b"), batch_size=8)
    assert tags(ds_b) == {2}


def test_same_remote_rerun_fetches_nothing(tmp_path):
    a = write_ds(str(tmp_path / "a"), N)
    local = str(tmp_path / "c")
    ds = StreamingDataset(remote=a, local=local, batch_size=8)
    check_samples(list(ds), range(N))
    assert ds.stats.shards_fetched > 0
    ds2 = StreamingDataset(remote=a, local=local, batch_size=8)
    check_samples(list(ds2), range(N))
    assert ds2.stats.shards_fetched == 0 and ds2.stats.bytes_fetched == 0


def test_remote_rewritten_in_place_rebinds_and_drops_changed_shards(tmp_path):
    remote = str(tmp_path / "r")
    write_tagged(remote, 1, hashes=["xxh64"])
    local = str(tmp_path / "c")
    ds = StreamingDataset(remote=remote, local=local, batch_size=8)
    assert tags(ds) == {1}
    old = read_binding(local)
    # the dataset is rewritten at the same URL: same names and sizes, new bytes (new hashes)
    shutil.rmtree(remote)
    write_tagged(remote, 2, hashes=["xxh64"])
    ds2 = StreamingDataset(remote=remote, local=local, batch_size=8)
    assert tags(ds2) == {2}  # size-equal stale shards are not served
    assert ds2.stats.shards_fetched == len(ds2.shards)
    new = read_binding(local)
    assert new is not None and old is not None
    assert new.remote == old.remote == remote and new.digest != old.digest
    assert files_of(local) == files_of(remote)


@pytest.mark.parametrize("hashes", [["xxh64"], None], ids=["hashes", "no-hashes"])
def test_index_grows_keeps_unchanged_shards(tmp_path, hashes):
    """Appending shards changes the index; shards whose entries are unchanged and carry a
    digest stay cached. Without digests an unchanged entry does not prove unchanged bytes (a
    dataset republished under the same names), so every shard is fetched again."""
    remote = str(tmp_path / "r")
    write_ds(remote, 200, hashes=hashes)
    local = str(tmp_path / "c")
    ds = StreamingDataset(remote=remote, local=local, batch_size=8)
    check_samples(list(ds), range(200))
    first = len(ds.shards)
    shutil.rmtree(remote)
    write_ds(remote, 400, hashes=hashes)  # same first samples, so the same first shards
    ds2 = StreamingDataset(remote=remote, local=local, batch_size=8)
    check_samples(list(ds2), range(400))
    same = sum(
        a.to_json() == b.to_json() for a, b in zip(ds.shards, ds2.shards[:first], strict=True)
    )
    assert same >= first - 1
    kept = same if hashes else 0
    assert ds2.stats.shards_fetched == len(ds2.shards) - kept


def test_local_only_dataset_read_in_place_gets_no_binding(tmp_path):
    src = write_ds(str(tmp_path / "d"), N)
    before = files_of(src)
    check_samples(list(StreamingDataset(local=src, batch_size=8)), range(N))
    check_samples(list(StreamingDataset(remote=src, batch_size=8)), range(N))
    assert files_of(src) == before
    assert not os.path.exists(os.path.join(src, ".astream", BINDING))
    assert not os.path.exists(os.path.join(src, ".astream", ENTRY_MARK))


def test_writer_output_as_local_is_adopted_when_it_is_the_same_dataset(tmp_path):
    src = write_ds(str(tmp_path / "d"), N)
    remote = str(tmp_path / "uploaded")
    shutil.copytree(src, remote)
    ds = StreamingDataset(remote=remote, local=src, batch_size=8)
    check_samples(list(ds), range(N))
    assert ds.stats.bytes_fetched == 0  # the shards written locally are the cache
    bound = read_binding(src)
    assert bound is not None and bound.remote == remote
    # astream did not create it: never an entry `astream cache clear` may delete
    assert not os.path.exists(os.path.join(src, ".astream", ENTRY_MARK))


def test_writer_output_of_another_dataset_is_never_overwritten(tmp_path):
    # with hashes the two shard tables differ (without, an unbound directory whose index is
    # byte-identical to the remote's is indistinguishable from that dataset: it is adopted)
    a = write_tagged(str(tmp_path / "a"), 1, hashes=["xxh64"])
    b = write_tagged(str(tmp_path / "b"), 2, hashes=["xxh64"])
    before = files_of(a)
    with pytest.raises(ConfigError) as e:
        StreamingDataset(remote=b, local=a, batch_size=8)
    assert str(e.value) == (
        f"local={a!r} already holds a dataset (its {INDEX} differs from the one of {b}) that "
        f"no remote is bound to; astream will not overwrite it: give `local` an empty or new "
        f"directory"
    )
    assert files_of(a) == before
    assert tags(StreamingDataset(local=a, batch_size=8)) == {1}


def test_streams_and_splits_each_bind_their_own_directory(tmp_path):
    from astream import Stream

    root = str(tmp_path / "r")
    write_tagged(os.path.join(root, "train"), 1)
    write_tagged(os.path.join(root, "val"), 2)
    local = str(tmp_path / "c")
    tr = StreamingDataset(remote=root, local=local, split="train", batch_size=8)
    va = StreamingDataset(remote=root, local=local, split="val", batch_size=8)
    assert (tags(tr), tags(va)) == ({1}, {2})
    assert read_binding(os.path.join(local, "train")).remote == os.path.join(root, "train")
    assert read_binding(os.path.join(local, "val")).remote == os.path.join(root, "val")
    mixed = StreamingDataset(
        streams=[
            Stream(remote=os.path.join(root, "train"), local=os.path.join(local, "train")),
            Stream(remote=os.path.join(root, "val"), local=os.path.join(local, "val")),
        ],
        batch_size=8,
    )
    assert tags(mixed) == {1, 2}
    with pytest.raises(ConfigError, match="is the cache of"):
        StreamingDataset(
            streams=[
                Stream(remote=os.path.join(root, "train"), local=os.path.join(local, "x")),
                Stream(remote=os.path.join(root, "val"), local=os.path.join(local, "x")),
            ],
            batch_size=8,
        )


def test_unreadable_binding_is_a_clear_error(tmp_path):
    a = write_ds(str(tmp_path / "a"), N)
    local = str(tmp_path / "c")
    StreamingDataset(remote=a, local=local, batch_size=8)
    path = os.path.join(local, ".astream", BINDING)
    with open(path, "w") as f:
        f.write("{not json")
    with pytest.raises(ConfigError) as e:
        StreamingDataset(remote=a, local=local, batch_size=8)
    assert str(e.value) == (
        f"{path} is not a valid astream binding (Expecting property name enclosed in double "
        f"quotes: line 1 column 2 (char 1)); delete {local} (or just that file) to rebuild it"
    )
    os.unlink(path)
    ds = StreamingDataset(remote=a, local=local, batch_size=8)  # re-bound from the index
    with open(path) as f:
        assert read_binding(local).remote == a and json.load(f)["remote"] == a
    check_samples(list(ds), range(N))


def test_shard_files_without_index_or_binding_are_refused(tmp_path):
    a = write_tagged(str(tmp_path / "a"), 1)
    b = write_tagged(str(tmp_path / "b"), 2)
    local = str(tmp_path / "c")
    shutil.copytree(a, local)
    os.unlink(os.path.join(local, INDEX))  # A's shards, nothing saying whose they are
    before = files_of(local)
    with pytest.raises(ConfigError) as e:
        StreamingDataset(remote=b, local=local, batch_size=8)
    assert str(e.value) == (
        f"local={local!r} holds shard.00000.mds but no {INDEX} and no binding: astream cannot "
        "tell which dataset it belongs to and will not serve or overwrite it; give `local` an "
        "empty or new directory"
    )
    assert files_of(local) == before


def test_bound_cache_whose_index_was_deleted_refetches_changed_data(tmp_path):
    remote = str(tmp_path / "r")
    write_tagged(remote, 1)
    local = str(tmp_path / "c")
    assert tags(StreamingDataset(remote=remote, local=local, batch_size=8)) == {1}
    os.unlink(os.path.join(local, INDEX))
    shutil.rmtree(remote)
    write_tagged(remote, 2, n=N + 7)  # another version of the same remote
    ds = StreamingDataset(remote=remote, local=local, batch_size=8)
    assert tags(ds) == {2} and ds.stats.shards_fetched == len(ds.shards)
