"""Which directories astream may call its own (``runtime/binding.py``): the default cache root,
and the directories creating a ``local`` would create, which are the only ones a cache entry
mark or ``astream cache clear`` may ever delete."""

from __future__ import annotations

import os

import pytest

from astream.runtime.binding import cache_base, new_dirs
from astream.runtime.config import default_local


def test_cache_base_is_the_env_dir_or_the_users_cache(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = os.path.join(str(tmp_path), "home")
    monkeypatch.setenv("HOME", home)
    monkeypatch.delenv("ASTREAM_CACHE_DIR", raising=False)
    assert cache_base() == os.path.join(home, ".cache", "astream")
    monkeypatch.setenv("ASTREAM_CACHE_DIR", "rel/cache")
    assert cache_base() == os.path.abspath("rel/cache")
    monkeypatch.setenv("ASTREAM_CACHE_DIR", "")  # empty: the default
    assert cache_base() == os.path.join(home, ".cache", "astream")


def test_new_dirs_are_the_missing_ones_outermost_first(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = str(tmp_path)
    monkeypatch.setenv("ASTREAM_CACHE_DIR", os.path.join(root, "base"))
    local = os.path.join(root, "a", "b", "c")
    assert new_dirs(local) == [os.path.join(root, "a"), os.path.join(root, "a", "b"), local]
    os.makedirs(os.path.join(root, "a", "b"))
    assert new_dirs(local) == [local]
    os.makedirs(os.path.join(local, ".astream"))  # only astream's metadata: still empty
    assert new_dirs(local) == [local]
    with open(os.path.join(local, "mine.txt"), "w") as f:
        f.write("x")
    assert new_dirs(local) == []  # a directory holding the user's files is never astream's
    assert new_dirs(os.path.join(local, "mine.txt", "x")) == [os.path.join(local, "mine.txt", "x")]


def test_a_default_cache_directory_is_astreams_but_the_root_never_is(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = os.path.join(str(tmp_path), "base")
    monkeypatch.setenv("ASTREAM_CACHE_DIR", base)
    local = default_local("s3://bucket/data", None)
    top = os.path.dirname(local)
    assert top == base and len(os.path.basename(local)) == 20
    # nothing exists yet: the entry is astream's, the base never is
    assert new_dirs(local) == [local]
    # a split under the entry: the whole chain from the entry down, even once it exists
    split = os.path.join(local, "train", "part")
    os.makedirs(split)
    with open(os.path.join(split, "x.mds"), "w") as f:
        f.write("x")
    assert new_dirs(split) == [local, os.path.join(local, "train"), split]
    # a directory in the base that is not a default-local name is left alone
    other = os.path.join(base, "my-data")
    os.makedirs(other)
    with open(os.path.join(other, "x"), "w") as f:
        f.write("x")
    assert new_dirs(other) == []
    # nor is anything outside the base, even under a 20-hex-digit name
    outside = os.path.join(str(tmp_path), "0123456789abcdef0123")
    os.makedirs(outside)
    with open(os.path.join(outside, "x"), "w") as f:
        f.write("x")
    assert new_dirs(outside) == []
