"""The running estimates random access weighs ranges against downloads with, and its memory
tier, exactly (plain objects: no store)."""

from __future__ import annotations

import pytest

from astream.errors import ConfigError
from astream.runtime.range_costs import (
    DEFAULT_MEMORY,
    SEED_BANDWIDTH,
    SEED_LATENCY,
    SampleMemo,
    StoreCosts,
    check_memory,
)


def test_seeds_then_measurements() -> None:
    c = StoreCosts()
    assert (c.latency, c.bandwidth) == (SEED_LATENCY, SEED_BANDWIDTH)
    assert c.price(64 << 20) == pytest.approx(SEED_LATENCY + 1.0)
    c.ranged(1000, 0.05)  # the first read replaces the latency seed
    assert c.latency == pytest.approx(0.05 - 1000 / SEED_BANDWIDTH)
    c.whole(10_000_000, 0.05 + 1.0)  # its latency taken off: 10 MB in ~1 s
    assert c.bandwidth == pytest.approx(10_000_000 / (1.0 + 1000 / SEED_BANDWIDTH))
    bw = c.bandwidth
    c.ranged(0, 0.15)  # later reads move the estimate a quarter of the way
    assert c.latency == pytest.approx(0.05 - 1000 / SEED_BANDWIDTH + 0.25 * 0.1, rel=1e-3)
    c.whole(10_000_000, c.latency + 0.5)
    assert c.bandwidth == pytest.approx(bw + 0.25 * (20_000_000 - bw))
    assert c.price(1_000_000) == pytest.approx(c.latency + 1_000_000 / c.bandwidth)


def test_a_read_faster_than_the_bandwidth_raises_it() -> None:
    c = StoreCosts()
    c.ranged(256 << 20, 1.0)  # 256 MiB in 1 s: the download is at least that fast
    assert c.bandwidth == 256 << 20 and c.latency == 0.0


def test_memo_keeps_the_latest_within_its_limit() -> None:
    m = SampleMemo(100)
    assert SampleMemo().limit == DEFAULT_MEMORY == 64 << 20
    m.put(0, 1, b"a" * 60)
    m.put(0, 2, b"b" * 30)
    assert m.get(0, 1) == b"a" * 60  # now the most recent
    m.put(1, 0, b"c" * 30)  # 120 > 100: the least recent, (0, 2), goes
    assert (m.get(0, 2), m.nbytes, len(m)) == (None, 90, 2)
    m.put(1, 1, b"d" * 101)  # larger than the limit: not kept, nothing pushed out
    assert (m.get(1, 1), m.nbytes) == (None, 90)
    m.drop_shard(0)
    assert (m.get(0, 1), m.get(1, 0), m.nbytes) == (None, b"c" * 30, 30)
    off = SampleMemo(0)
    off.put(0, 0, b"x")
    assert (off.get(0, 0), off.nbytes) == (None, 0)


@pytest.mark.parametrize("bad", [-1, 2**46 + 1, "64MiB", 1.5, False, None])
def test_check_memory_names_the_argument(bad: object) -> None:
    with pytest.raises(ConfigError, match=r"^random_memory must be an int of bytes in 0\.\."):
        check_memory(bad)
    assert check_memory(0) == 0 and check_memory(2**46) == 2**46
