"""The reference's ``construct_from_registry``: build a registered item by name.

It works with any registry that has ``get(name)``, astream's ``streams_registry`` among them.
The reference's catalogue-based ``create_registry``/``TypedRegistry`` are left out: astream's
registries are plain objects and need no catalogue (docs/migrating.md).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from astream.errors import ConfigError

__all__ = ["construct_from_registry"]


def _pre_validate(name: str, item: Any, check: Callable[[Any], None] | type | None) -> None:
    if check is None:
        return
    if isinstance(check, type):
        if not (isinstance(item, type) and issubclass(item, check)):
            raise ConfigError(f"{name!r} is registered as {item!r}, not a subclass of {check!r}")
    elif callable(check):
        check(item)
    else:
        raise ConfigError(f"pre_validation_function must be a callable or a type, got {check!r}")


def construct_from_registry(
    name: str,
    registry: Any,
    partial_function: bool = True,
    pre_validation_function: Callable[[Any], None] | type | None = None,
    post_validation_function: Callable[[Any], None] | None = None,
    kwargs: dict[str, Any] | None = None,
) -> Any:
    """``registry.get(name)`` built with ``kwargs``: a class is instantiated; a function is
    called when ``partial_function`` is False, else bound to ``kwargs`` with
    ``functools.partial``. A type as ``pre_validation_function`` requires a subclass of it;
    a callable one is called with the registered item, and ``post_validation_function`` with
    the built one (each raises to refuse). What is neither a class nor callable is refused."""
    item = registry.get(name)
    _pre_validate(name, item, pre_validation_function)
    kwargs = kwargs or {}
    if isinstance(item, type) or (callable(item) and not partial_function):
        built = item(**kwargs)
    elif callable(item):
        built = functools.partial(item, **kwargs)
    else:
        raise ConfigError(f"{name!r} is registered as {item!r}: not a class nor a function")
    if post_validation_function is not None:
        post_validation_function(built)
    return built
