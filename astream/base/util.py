"""The reference's ``streaming.base.util`` helpers that training and conversion scripts import.

``bytes_to_int`` and ``number_abbrev_to_int`` parse exactly the texts the reference parses, to
the same numbers (golden-tested against it); what it refuses is a ``ConfigError`` (its
``ValueError``). ``merge_index`` is astream's own (``astream.writer.merge``).
``clean_stale_shared_memory`` has nothing to do: astream's only shared memory is anonymous and
goes with the processes that hold it, so no job leaves any behind.
"""

from __future__ import annotations

import functools
import os
import random
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from astream.errors import ConfigError
from astream.writer.merge import merge_index

__all__ = [
    "bytes_to_int",
    "clean_stale_shared_memory",
    "get_import_exception_message",
    "get_list_arg",
    "merge_index",
    "number_abbrev_to_int",
    "retry",
    "wait_for_file_to_exist",
]

F = TypeVar("F", bound=Callable[..., Any])

_BYTE_UNITS = {f"{p}b": 1024 ** (k + 1) for k, p in enumerate("kmgtpezy")}
_COUNT_UNITS = {"k": 10**3, "m": 10**6, "b": 10**9, "t": 10**12}


def _scaled(text: str, units: dict[str, int], what: str) -> int | None:
    """``text`` (lower case, stripped) with one of ``units``' suffixes, as an int; None if it
    has none. A number before the suffix may be fractional or negative (``"1.5kb"``)."""
    for suffix, factor in units.items():
        if text.endswith(suffix):
            try:
                return int(float(text[: -len(suffix)]) * factor)
            except ValueError:
                raise ConfigError(
                    f"Unsupported value/suffix {text!r}: {what}: cannot parse it"
                ) from None
    return None


def bytes_to_int(bytes_str: int | float | str) -> int:
    """A byte size: an int (or float, truncated), digits, digits with ``b``, or a number with
    a binary unit (``kb`` = 1024 ... ``yb``), any case, spaces around ignored."""
    if isinstance(bytes_str, (int, float)):
        return int(bytes_str)
    text = bytes_str.lower().strip()
    got = _scaled(text, _BYTE_UNITS, "bytes")
    if got is not None:
        return got
    digits = text[:-1] if text.endswith("b") else text
    if digits.isdigit():
        return int(digits)
    raise ConfigError(
        f"Unsupported value/suffix {bytes_str!r}: bytes: cannot parse it; "
        f"use b, {', '.join(_BYTE_UNITS)}"
    )


def number_abbrev_to_int(abbrev_str: int | float | str) -> int:
    """A count: an int (or float, truncated), digits, or a number with ``k`` (10**3), ``m``,
    ``b`` or ``t`` (10**12), any case, spaces around ignored."""
    if isinstance(abbrev_str, (int, float)):
        return int(abbrev_str)
    text = abbrev_str.lower().strip()
    got = _scaled(text, _COUNT_UNITS, "number")
    if got is not None:
        return got
    if text.isdigit():
        return int(text)
    raise ConfigError(
        f"Unsupported value/suffix {abbrev_str!r}: number: cannot parse it; use k, m, b or t"
    )


def clean_stale_shared_memory() -> None:
    """Nothing to clean (module docstring): kept so that scripts calling it run unchanged."""


def get_import_exception_message(package_name: str, extra_deps: str) -> str:
    """The message for an optional dependency that is not installed: the extra to install."""
    return (
        f"astream was installed without {package_name} support. To use it, run "
        f"`pip install 'astream[{extra_deps}]'`."
    )


def get_list_arg(text: str) -> list[str]:
    """A comma-separated list; ``""`` is the empty list."""
    return text.split(",") if text else []


def wait_for_file_to_exist(
    filename: str, poll_interval: float, timeout: float, err_msg: str
) -> None:
    """Poll until ``filename`` exists; ``RuntimeError`` with ``err_msg`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(filename):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{err_msg}: {filename} did not appear within {timeout} s")
        time.sleep(poll_interval)


def retry(
    exc_class: Any = Exception,
    clean_up_fn: Callable[[], None] | None = None,
    num_attempts: int = 3,
    initial_backoff: float = 1.0,
    max_jitter: float = 0.5,
) -> Any:
    """Retry a function on ``exc_class`` (a class or a sequence of them): ``num_attempts``
    attempts in all, the k-th retry after ``initial_backoff * 2**k`` seconds plus up to
    ``max_jitter`` of jitter, ``clean_up_fn`` called after each failure that is retried; the last
    failure is raised. Usable bare (``@retry``) or called (``@retry(OSError, ...)``)."""
    if callable(exc_class) and not isinstance(exc_class, type):
        return retry()(exc_class)  # bare @retry: the function itself came in
    if num_attempts < 1:
        raise ConfigError(f"num_attempts must be >= 1, got {num_attempts}")
    kinds = tuple(exc_class) if isinstance(exc_class, Sequence) else exc_class

    def wrap(func: F) -> F:
        @functools.wraps(func)
        def attempt(*args: Any, **kwargs: Any) -> Any:
            for k in range(num_attempts):
                try:
                    return func(*args, **kwargs)
                except kinds:
                    if k == num_attempts - 1:
                        raise
                    if clean_up_fn is not None:
                        clean_up_fn()
                    time.sleep(initial_backoff * 2**k + random.random() * max_jitter)
            raise AssertionError("unreachable")

        return attempt  # type: ignore[return-value]

    return wrap
