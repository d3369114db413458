"""The planner's arguments: the shuffles and models it knows, their checks, and the order
arguments a planned dataset is configured with.

May import: core, errors (and ``core.refshuffle`` lazily).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from astream.core.eviction import check_policy
from astream.errors import ConfigError

__all__ = ["MODELS", "REFERENCE_SHUFFLES", "SHUFFLES", "check_args", "config_args"]

REFERENCE_SHUFFLES = ("py1e", "py1br", "py1s", "py2s", "naive")
# "none" is shuffle=False; the others are the shuffle_algo values astream implements
SHUFFLES = ("none", "astream", *REFERENCE_SHUFFLES)
MODELS = ("auto", "exact", "runs")


def check_args(
    *,
    cache_policy: str | Sequence[str],
    shuffles: Sequence[str] | None,
    model: str,
    order: dict[str, Any],
    bandwidth_mbps: float | None,
    latency_ms: float,
    step_ms: float,
    epochs: int,
    interleavings: int,
    quality_samples: int,
) -> tuple[list[str], Sequence[str]]:
    """``simulate_index``'s arguments checked: the cache policies and the shuffles to plan
    (default: every one of :data:`SHUFFLES`); any bad one is a ``ConfigError`` naming it."""
    policies = [cache_policy] if isinstance(cache_policy, str) else list(cache_policy)
    if not policies:
        raise ConfigError("cache_policy: give at least one policy")
    for p in policies:
        check_policy(p)
    if shuffles is None:
        shuffles = SHUFFLES
    if isinstance(shuffles, str) or not shuffles:
        raise ConfigError(f"shuffles: need a list of names from {', '.join(SHUFFLES)}")
    for s in shuffles:
        if s not in SHUFFLES:
            raise ConfigError(f"shuffles: unknown shuffle {s!r} (known: {', '.join(SHUFFLES)})")
    if model not in MODELS:
        raise ConfigError(f"model must be one of {', '.join(MODELS)}, got {model!r}")
    for name in ("shuffle", "shuffle_algo"):
        if name in order:
            raise ConfigError(f"simulate: pass the orders to compare as shuffles=, not {name}=")
    if bandwidth_mbps is not None and not bandwidth_mbps > 0:
        raise ConfigError(f"bandwidth_mbps must be > 0, got {bandwidth_mbps}")
    if not latency_ms >= 0:
        raise ConfigError(f"latency_ms must be >= 0, got {latency_ms}")
    if not step_ms >= 0:
        raise ConfigError(f"step_ms must be >= 0, got {step_ms}")
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ConfigError(f"epochs must be an int >= 1, got {epochs!r}")
    if isinstance(interleavings, bool) or not isinstance(interleavings, int) or interleavings < 0:
        raise ConfigError(f"interleavings must be an int >= 0, got {interleavings!r}")
    if quality_samples < 1:
        raise ConfigError(f"quality_samples must be >= 1, got {quality_samples}")
    return policies, shuffles


def config_args(base: dict[str, Any], shuffle: str, nodes: int = 1) -> dict[str, Any]:
    args = dict(base)
    args["shuffle"] = shuffle != "none"
    args["shuffle_algo"] = "astream" if shuffle == "none" else shuffle
    if args.get("num_canonical_nodes") is None and shuffle != "astream":
        # the reference's default, from the planned World (the dataset takes it from the
        # World it starts on): 64 x nodes for py1s/py2s, the node count otherwise; "none" is
        # the dataset's default algorithm (py1e) unshuffled, so it takes py1e's
        from astream.core.refshuffle import default_num_canonical_nodes

        algo = "py1e" if shuffle == "none" else shuffle
        args["num_canonical_nodes"] = default_num_canonical_nodes(algo, nodes)
    defaults: dict[str, Any] = {
        "download_retry": 2,
        "download_timeout": 60,
        "validate_hash": None,
        "epoch_size": None,
        "predownload": None,
        "cache_limit": None,
        "sampling_method": "balanced",
        "sampling_granularity": 1,
        "partition_algo": "relaxed",
        "num_canonical_nodes": None,
        "shuffle_algo": "py1e",
        "shuffle_seed": 9176,
        "shuffle_block_size": None,
        "batching_method": "random",
        "replication": None,
    }
    unknown = sorted(set(args) - set(defaults) - {"batch_size", "shuffle"})
    if unknown:
        raise ConfigError(f"simulate: unknown order argument(s) {', '.join(unknown)}")
    defaults.update(args)
    return defaults
