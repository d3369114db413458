"""Human numbers: byte sizes (``"64mb"`` -> 67108864) and sample counts (``"2b"`` -> 2e9).

:func:`parse_size` (``cache_limit``, ``size_limit``): units are powers of 1024 (``kb`` = 1024),
as the reference library reads them: ``b kb mb gb tb pb eb zb yb``, case-insensitive,
surrounding spaces ignored, a decimal number allowed before a unit (``"1.5kb"`` -> 1536,
truncated toward zero).

:func:`parse_count` (``epoch_size``): a number of *samples*, with the reference's abbreviations
``k`` (10**3), ``m`` (10**6), ``b`` (10**9), ``t`` (10**12), case-insensitive. Exactly the
strings the reference accepts are accepted, with the same value (tests/core/compat_golden.json):
surrounding spaces are ignored; before a unit, any decimal Python ``float`` accepts (``"1.5k"``,
``" 7 k"``, ``"1e3k"``, ``"1_000k"``), the product truncated toward zero; without a unit, only
digits (``"12"``; ``"1.5"``, ``"1e3"``, ``"-5"`` are refused). Where the reference would
overflow (``"infk"``) or accept a negative count, this raises ``ConfigError``.
"""

from __future__ import annotations

import math

from astream.errors import ConfigError

__all__ = ["parse_count", "parse_size"]

_UNITS = {
    "kb": 1 << 10,
    "mb": 1 << 20,
    "gb": 1 << 30,
    "tb": 1 << 40,
    "pb": 1 << 50,
    "eb": 1 << 60,
    "zb": 1 << 70,
    "yb": 1 << 80,
}


def parse_size(value: int | str, name: str) -> int:
    """Parse an int or a size string into bytes; ``name`` is the argument named in errors."""
    if isinstance(value, bool):
        raise ConfigError(f"{name} must be an int or a size string like '64mb', got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if not isinstance(value, str):
        raise ConfigError(f"{name} must be an int or a size string like '64mb', got {value!r}")
    text = value.strip().lower()
    for suffix, factor in _UNITS.items():
        if text.endswith(suffix):
            number = text[: -len(suffix)].strip()
            try:
                amount = float(number)
            except ValueError:
                break
            if amount != amount or amount in (float("inf"), float("-inf")):
                break
            return int(amount * factor)
    else:
        digits = text[:-1] if text.endswith("b") else text
        if digits.isdigit():
            return int(digits)
    raise ConfigError(
        f"{name}: cannot parse size {value!r}; use an int or a number with a unit in "
        f"b, {', '.join(_UNITS)} (powers of 1024)"
    )


_COUNT_UNITS = {"k": 10**3, "m": 10**6, "b": 10**9, "t": 10**12}


def parse_count(value: object, name: str) -> int:
    """Parse a sample count (an int or a string like ``"2b"``); ``name`` is named in errors.

    A negative count is a ``ConfigError``; the caller applies any upper bound.
    """
    hint = "an int or a string like '500k' (k=10**3, m=10**6, b=10**9, t=10**12 samples)"
    if isinstance(value, bool):
        raise ConfigError(f"{name} must be {hint}, got {value!r}")
    if isinstance(value, float):
        if not value.is_integer():
            raise ConfigError(f"{name} must be a whole number of samples, got {value!r}")
        value = int(value)
    if hasattr(value, "__index__") and not isinstance(value, str):
        count = int(value.__index__())  # int and numpy integers
    elif isinstance(value, str):
        count = _parse_count_text(value, name, hint)
    else:
        raise ConfigError(f"{name} must be {hint}, got {type(value).__name__} {value!r}")
    if count < 0:
        raise ConfigError(f"{name} must be >= 0 samples, got {count} (from {value!r})")
    return count


def _parse_count_text(value: str, name: str, hint: str) -> int:
    text = value.lower().strip()
    unit = _COUNT_UNITS.get(text[-1:])
    if unit is not None:
        try:
            amount = float(text[:-1])
        except ValueError:
            amount = None
        if amount is not None and math.isfinite(amount):
            return int(amount * unit)
    elif text.isdigit():
        try:
            return int(text)
        except ValueError:
            pass  # digits int() does not read, e.g. superscripts
    raise ConfigError(f"{name}: cannot parse {value!r} as a number of samples; use {hint}")
