"""Human byte sizes: ``"64mb"`` -> 67108864.

Units are powers of 1024 (``kb`` = 1024), as the reference library reads them: ``b kb mb gb tb
pb eb zb yb``, case-insensitive, surrounding spaces ignored, a decimal number allowed before a
unit (``"1.5kb"`` -> 1536, truncated toward zero).
"""

from __future__ import annotations

from astream.errors import ConfigError

__all__ = ["parse_size"]

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
