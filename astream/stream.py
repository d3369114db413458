"""``Stream``: one dataset (a remote and/or local directory) inside a mix, and its weight.

Theory of operation
-------------------
A ``Stream`` is configuration only: it validates its arguments (``ConfigError`` naming the
argument) and does no I/O -- no directory is created, no remote is contacted, and, unlike the
reference, no temporary directory is invented when ``local`` is omitted (the dataset decides
where the cache goes). Argument names and meanings follow mosaicml-streaming's ``Stream``:

- ``remote`` / ``local``: where the shards live / are cached; at least one is needed, but a
  dataset may supply them, so that check is :meth:`Stream.check_location`.
- ``split``: a sub-directory under both roots.
- ``proportion`` (relative weight), ``repeat`` (absolute: times per epoch, fractional allowed),
  ``choose`` (absolute: samples per epoch): at most one. Their semantics live in
  :mod:`astream.core.mixing`.
- ``download_retry`` (retries after the first attempt, >= 0), ``download_timeout`` (seconds,
  > 0), ``validate_hash`` (a hash algorithm name), ``keep_zip``: ``None`` means "use the
  dataset's default".
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from astream.core.order import StreamSpec
from astream.errors import ConfigError

__all__ = ["Stream"]


def _opt_str(name: str, value: object) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"{name} must be a str or None, got {type(value).__name__}")
    return value


def _opt_number(name: str, value: object, *, positive: bool = False) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        need = "> 0" if positive else ">= 0"
        raise ConfigError(f"{name} must be finite and {need}, got {value}")
    return float(value)


def _opt_int(name: str, value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < 0:
        raise ConfigError(f"{name} must be >= 0, got {value}")
    return value


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
    ) -> None:
        self.remote = _opt_str("remote", remote)
        self.local = _opt_str("local", local)
        self.split = _opt_str("split", split) or ""
        if sum(w is not None for w in (proportion, repeat, choose)) > 1:
            raise ConfigError("Stream: give at most one of proportion, repeat, choose")
        self.proportion = _opt_number("proportion", proportion)
        self.repeat = _opt_number("repeat", repeat)
        self.choose = _opt_int("choose", choose)
        self.download_retry = _opt_int("download_retry", download_retry)
        self.download_timeout = _opt_number("download_timeout", download_timeout, positive=True)
        self.validate_hash = _opt_str("validate_hash", validate_hash)
        if keep_zip is not None and not isinstance(keep_zip, bool):
            raise ConfigError(f"keep_zip must be a bool or None, got {type(keep_zip).__name__}")
        self.keep_zip = keep_zip

    def check_location(self) -> None:
        """Raise ``ConfigError`` unless ``remote`` or ``local`` is set."""
        if not (self.remote or self.local):
            raise ConfigError("Stream: remote and/or local must be provided")

    def spec(self, shard_sizes: NDArray[np.integer]) -> StreamSpec:
        """The order's view of this stream, given its shard sample counts."""
        return StreamSpec(
            np.asarray(shard_sizes, np.int64), self.proportion, self.repeat, self.choose
        )

    def __repr__(self) -> str:
        fields = ("remote", "local", "split", "proportion", "repeat", "choose")
        shown = ", ".join(f"{f}={getattr(self, f)!r}" for f in fields if getattr(self, f))
        return f"Stream({shown})"
