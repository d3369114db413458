"""``Stream``: one dataset (a remote and/or local directory) inside a mix, and its weight.

Public as :mod:`astream.stream`. It lives in the core layer because it is configuration only:
the runtime's dataset configuration checks per-stream settings with the same validators
(:func:`opt_int`, :func:`opt_number`, :func:`opt_hash`) and builds registered ``Stream``
classes by name, and the runtime may import the core but never the API layer above it.

Theory of operation
-------------------
A ``Stream`` is configuration only: it validates its arguments (``ConfigError`` naming the
argument) and does no I/O -- no directory is created, no remote is contacted, and, unlike the
reference, no temporary directory is invented when ``local`` is omitted (the dataset decides
where the cache goes). Argument names and meanings follow mosaicml-streaming's ``Stream``:

- ``remote`` / ``local``: where the shards live / are cached; at least one is needed, but a
  dataset may supply them, so that check is :meth:`Stream.check_location`.
- ``split``: a sub-directory under both roots.
- ``proportion`` (relative weight, at most 2**53), ``repeat`` (absolute: times per epoch,
  fractional allowed, at most 2**20), ``choose`` (absolute: samples per epoch, at most 2**40):
  at most one. Their semantics live in :mod:`astream.core.mixing`.
- ``download_retry`` (retries after the first attempt, 0..100), ``download_timeout`` (seconds,
  > 0 and at most 7 days), ``validate_hash`` (a hash algorithm name), ``keep_zip``: ``None``
  means "use the dataset's"; a value overrides the dataset's for this stream's shards only.

After the dataset is built, as in the reference, the stream's public ``proportion``,
``repeat`` and ``choose`` hold the *resolved* weights (a float fraction of the epoch, a float
multiplier of the stream's samples, an int sample count), and ``download_retry``,
``download_timeout``, ``validate_hash``, ``keep_zip`` the settings in force for it. The values
given at construction stay in ``_proportion``, ``_repeat``, ``_choose``, ``_download_retry``,
``_download_timeout``, ``_keep_zip`` (the reference's names), so one ``Stream`` may be reused
by several datasets.

- ``format``: ``"mds"`` (the default: an MDS dataset with an ``index.json``) or ``"parquet"``
  (a table of ``*.parquet`` objects under ``remote``/``local``, each row group a virtual shard;
  see docs/parquet.md). Parquet only: ``columns`` (the projection; None: every column),
  ``files`` (keys relative to the root instead of listing it) and ``split`` (a Hugging Face
  split: ``data/train-*.parquet``, not a sub-directory) and ``index_source`` (None or
  ``"list"``: the files are the listing's, checked against any cached index; ``"published"``:
  the files are those of the index ``astream index`` published next to the data, and the
  prefix is not listed -- see docs/parquet.md).

``streams_registry`` maps names to ``Stream`` classes (``"stream"`` is :class:`Stream`): a
``StreamingDataset(remote=..., stream_name="mine", stream_config={...})`` builds its single
stream with the class registered as ``"mine"``, as the reference does.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray

from astream.core.order import StreamSpec
from astream.errors import ConfigError

__all__ = [
    "FORMATS",
    "MAX_CHOOSE",
    "MAX_DOWNLOAD_RETRY",
    "MAX_DOWNLOAD_TIMEOUT",
    "MAX_PROPORTION",
    "MAX_REPEAT",
    "Stream",
    "StreamRegistry",
    "opt_hash",
    "opt_int",
    "opt_number",
    "streams_registry",
]

MAX_DOWNLOAD_RETRY = 100  # retries after the first attempt
MAX_DOWNLOAD_TIMEOUT = 7 * 24 * 3600.0  # seconds per request
MAX_CHOOSE = 1 << 40  # samples per epoch from one stream (as epoch_size)
MAX_REPEAT = float(1 << 20)  # times a stream is repeated per epoch
# relative weight: users pass fractions, or raw sample / token counts (the largest corpora hold
# ~1e14 tokens); 2**53 is above every such count, and a sum of such weights stays exact+finite
MAX_PROPORTION = float(1 << 53)
FORMATS = ("mds", "parquet")


def _opt_str(name: str, value: object) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"{name} must be a str or None, got {type(value).__name__}")
    return value


def _fspath(value: object) -> object:
    """A ``pathlib.Path`` (or any ``os.PathLike``) as its string; anything else unchanged."""
    return os.fspath(value) if isinstance(value, os.PathLike) else value


def opt_number(
    name: str, value: object, *, positive: bool = False, maximum: float | None = None
) -> float | None:
    """``value`` as a float, None kept; a bool, a non-number, NaN, a negative number (zero too
    with ``positive``) or one above ``maximum`` is a ConfigError naming ``name``."""
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
        raise ConfigError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    v = float(value)
    if not math.isfinite(v) or v < 0 or (positive and v == 0):
        need = "> 0" if positive else ">= 0"
        raise ConfigError(f"{name} must be finite and {need}, got {value}")
    if maximum is not None and v > maximum:
        raise ConfigError(f"{name} must be at most {maximum:g}, got {value}")
    return v


def opt_int(name: str, value: object, maximum: int) -> int | None:
    """``value`` as an int in 0..``maximum``, None kept; anything else is a ConfigError naming
    ``name``."""
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ConfigError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    v = int(value)
    if v < 0:
        raise ConfigError(f"{name} must be >= 0, got {v}")
    if v > maximum:
        raise ConfigError(f"{name} must be at most {maximum}, got {v}")
    return v


def _str_list(name: str, value: object, fmt: str) -> list[str] | None:
    if value is None:
        return None
    if fmt != "parquet":
        raise ConfigError(f"{name} is for format='parquet' streams (format={fmt!r})")
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise ConfigError(f"{name} must be a list of str, got {type(value).__name__}")
    out = list(value)
    if not out or not all(isinstance(x, str) and x for x in out) or len(set(out)) != len(out):
        raise ConfigError(f"{name} must be a non-empty list of distinct non-empty str: {value!r}")
    return out


def _index_source(value: object, fmt: str, files: list[str] | None) -> str | None:
    if value is None or value == "list":
        return None
    if value != "published":
        raise ConfigError(f"index_source must be 'list', 'published' or None, got {value!r}")
    if fmt != "parquet":
        raise ConfigError(f"index_source is for format='parquet' streams (format={fmt!r})")
    if files is not None:
        raise ConfigError(
            "index_source='published': the published index defines the files; give no `files`"
        )
    return "published"


def opt_hash(value: object) -> str | None:
    """A ``validate_hash`` argument: a known hash algorithm's name, or None (no validation)."""
    if value is None or value == "":
        return None  # the reference treats an empty name as no validation
    from astream.core.hashing import validate_hash

    try:
        return validate_hash(value)  # type: ignore[arg-type]
    except ConfigError as exc:
        raise ConfigError(f"validate_hash: {exc}") from None


class Stream:
    """One stream of a (possibly mixed) dataset. Validation only, no I/O."""

    def __init__(
        self,
        *,
        remote: str | None = None,
        local: str | None = None,
        split: str | None = None,
        proportion: float | None = None,
        repeat: float | None = None,
        choose: int | None = None,
        download_retry: int | None = None,
        download_timeout: float | None = None,
        validate_hash: str | None = None,
        keep_zip: bool | None = None,
        format: str = "mds",
        columns: list[str] | None = None,
        files: list[str] | None = None,
        index_source: str | None = None,
    ) -> None:
        if format not in FORMATS:
            raise ConfigError(f"format must be one of {FORMATS}, got {format!r}")
        self.format = format
        self.columns = _str_list("columns", columns, format)
        self.files = _str_list("files", files, format)
        if self.files is not None:
            for k in self.files:
                if k.startswith("/") or ".." in k.split("/") or "://" in k:
                    raise ConfigError(f"files: {k!r} must be a key relative to the remote/local")
        self.index_source = _index_source(index_source, format, self.files)
        self.remote = _opt_str("remote", _fspath(remote))
        self.local = _opt_str("local", _fspath(local))
        self.split = _opt_str("split", split) or ""
        if sum(w is not None for w in (proportion, repeat, choose)) > 1:
            raise ConfigError("Stream: give at most one of proportion, repeat, choose")
        self._proportion = opt_number("proportion", proportion, maximum=MAX_PROPORTION)
        self._repeat = opt_number("repeat", repeat, maximum=MAX_REPEAT)
        self._choose = opt_int("choose", choose, MAX_CHOOSE)
        self._download_retry = opt_int("download_retry", download_retry, MAX_DOWNLOAD_RETRY)
        self._download_timeout = opt_number(
            "download_timeout", download_timeout, positive=True, maximum=MAX_DOWNLOAD_TIMEOUT
        )
        self._validate_hash = opt_hash(validate_hash)
        if keep_zip is not None and not isinstance(keep_zip, (bool, np.bool_)):
            raise ConfigError(f"keep_zip must be a bool or None, got {type(keep_zip).__name__}")
        self._keep_zip = None if keep_zip is None else bool(keep_zip)
        # Public values: what was given until a dataset resolves them (see the module doc).
        self.proportion: float | None = self._proportion
        self.repeat: float | None = self._repeat
        self.choose: int | None = self._choose
        self.download_retry: int | None = self._download_retry
        self.download_timeout: float | None = self._download_timeout
        self.validate_hash: str | None = self._validate_hash
        self.keep_zip: bool | None = self._keep_zip

    def check_location(self) -> None:
        """Raise ``ConfigError`` unless ``remote`` or ``local`` is set."""
        if not (self.remote or self.local):
            raise ConfigError("Stream: remote and/or local must be provided")

    def spec(self, shard_sizes: NDArray[np.integer]) -> StreamSpec:
        """The order's view of this stream, given its shard sample counts."""
        return StreamSpec(
            np.asarray(shard_sizes, np.int64), self._proportion, self._repeat, self._choose
        )

    def __repr__(self) -> str:
        fields = ("remote", "local", "split", "proportion", "repeat", "choose", "columns")
        shown = ", ".join(f"{f}={getattr(self, f)!r}" for f in fields if getattr(self, f))
        fmt = ", format='parquet'" if self.format == "parquet" else ""
        if self.index_source:
            fmt += f", index_source={self.index_source!r}"
        return f"Stream({shown}{fmt})"


T = TypeVar("T")


class StreamRegistry:
    """Names -> ``Stream`` classes (or callables returning a ``Stream``), like the reference's
    ``streams_registry``: ``register(name, func=cls)``, or ``@streams_registry.register(name)``
    on a class; ``get(name)``; ``get_all()``; ``name in streams_registry``."""

    def __init__(self) -> None:
        self._items: dict[str, Callable[..., Any]] = {}

    def register(self, name: str, *, func: T | None = None) -> Any:
        if not isinstance(name, str) or not name:
            raise ConfigError(f"streams_registry: a name must be a non-empty str, got {name!r}")

        def add(f: T) -> T:
            if not callable(f):
                raise ConfigError(f"streams_registry[{name!r}]: {f!r} is not callable")
            self._items[name] = f
            return f

        return add if func is None else add(func)

    def __call__(self, name: str, func: T | None = None) -> Any:
        return self.register(name, func=func)

    def get(self, name: str) -> Callable[..., Any]:
        try:
            return self._items[name]
        except (KeyError, TypeError):
            raise ConfigError(
                f"stream_name={name!r} is not registered; known: {', '.join(sorted(self._items))}"
            ) from None

    def get_all(self) -> dict[str, Callable[..., Any]]:
        return dict(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items


streams_registry = StreamRegistry()
streams_registry.register("stream", func=Stream)
