"""Whether the first batch's samples are read by ranges (``RangeReads._ranges_pay``): the
wanted samples of a shard merge into one GET across gaps under 1 MiB, and the ranges pay when
their bytes, with each shard's header, stay within ``range_share`` of the shards' bytes."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from astream.core.shard import header_size
from astream.runtime.ranges import RangeReads

N = 100
EACH = 512 * 1024  # a gap of one sample merges (512 KiB < 1 MiB), a gap of two splits
HEAD = header_size(N)
WHOLE = HEAD + N * EACH


def pays(wants: list[tuple[int, list[int]]], share: float, n_shards: int = 1) -> bool:
    entry = SimpleNamespace(format="mds", samples=N, raw_data=SimpleNamespace(bytes=WHOLE))
    engine = SimpleNamespace(catalog=SimpleNamespace(entries=[entry] * n_shards), range_share=share)
    return RangeReads._ranges_pay(engine, wants)  # type: ignore[arg-type]


def share_of(samples: int, shards: int = 1, less: int = 0) -> float:
    """The share at which reading ``samples`` samples and the headers costs exactly the
    allowed bytes (``less`` bytes fewer: one byte short of paying)."""
    return (samples * EACH + shards * HEAD - less) / (shards * WHOLE)


@pytest.mark.parametrize(
    ("wanted", "samples_read"),
    [
        ([0], 1),
        ([0, 2], 3),  # one sample between them: one GET over three samples
        ([0, 3], 2),  # two between them (1 MiB): two GETs of one sample
        ([5, 0, 5, 2, 9, 11, 40], 8),  # unsorted, repeated: runs 0-2, 5, 9-11, 40
        (list(range(N)), N),
    ],
)
def test_ranges_merge_across_small_gaps_and_pay_within_the_share(
    wanted: list[int], samples_read: int
) -> None:
    at = share_of(samples_read)
    assert pays([(0, wanted)], at)  # exactly at the share: pays
    assert not pays([(0, wanted)], share_of(samples_read, less=1))


def test_the_share_counts_every_shard_of_the_batch() -> None:
    wants = [(0, [0, 3]), (1, [7])]
    assert pays(wants, share_of(3, shards=2), n_shards=2)
    assert not pays(wants, share_of(3, shards=2, less=1), n_shards=2)
