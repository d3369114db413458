"""astream.ray.MDSDatasink on a real local Ray (2 CPUs): every row once, retries, reruns."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from astream.errors import ConfigError, OutputExistsError
from astream.local import LocalDataset

COLUMNS = {"id": "int64", "text": "str", "vec": "ndarray:float32"}


@pytest.fixture(scope="module")
def ray_ctx(s3_server: Any) -> Iterator[Any]:
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _dataset(ray: Any, n: int, blocks: int) -> Any:
    return ray.data.range(n, override_num_blocks=blocks).map_batches(
        lambda b: {
            "id": b["id"],
            "text": np.array([f"t{i}" for i in b["id"]], dtype=object),
            "vec": np.stack([np.full(3, i, dtype=np.float32) for i in b["id"]]),
        },
        batch_format="numpy",
    )


def _ids(samples: Any) -> list[int]:
    return sorted(int(s["id"]) for s in samples)


@pytest.mark.parametrize("where", ["local", "s3"])
def test_every_row_once(ray_ctx: Any, where: str, s3_bucket: str, tmp_path: Path) -> None:
    from astream.ray import MDSDatasink

    n = 20_000
    out = str(tmp_path / "out") if where == "local" else f"{s3_bucket}/ray-{uuid.uuid4().hex[:8]}"
    sink = MDSDatasink(out, COLUMNS, size_limit=1 << 16, compression="zstd")
    _dataset(ray_ctx, n, 4).write_datasink(sink)
    assert sum(sink.partition_counts) == n
    if where == "local":
        samples = list(LocalDataset(out))
    else:
        from astream.torch.dataset import StreamingDataset

        samples = list(StreamingDataset(remote=out, local=str(tmp_path / "c"), batch_size=8))
    assert _ids(samples) == list(range(n))
    s = next(x for x in samples if int(x["id"]) == 777)
    assert s["text"] == "t777" and s["vec"].tolist() == [777.0] * 3
    with pytest.raises(OutputExistsError, match="not empty"):
        _dataset(ray_ctx, 10, 1).write_datasink(MDSDatasink(out, COLUMNS))


def test_killed_write_task_is_retried_without_duplicates(ray_ctx: Any, tmp_path: Path) -> None:
    from astream.ray import MDSDatasink

    marker = str(tmp_path / "died")

    class DyingSink(MDSDatasink):  # type: ignore[misc]
        """Task 1's first attempt kills its worker after 500 rows (shards already flushed)."""

        def write(self, blocks: Any, ctx: Any) -> Any:
            from astream.integrations.frames import frame_samples
            from astream.writer.parts import write_part

            doomed = ctx.task_idx == 1 and not os.path.exists(marker)

            def samples() -> Iterator[Any]:
                k = 0
                for b in blocks:
                    for s in frame_samples(b, self.columns):
                        if doomed and k == 500:
                            open(marker, "w").close()
                            os._exit(1)
                        k += 1
                        yield s

            return write_part(samples(), self.out, ctx.task_idx, self.writer_kwargs)

    out = tmp_path / "out"
    n = 8_000
    ds = _dataset(ray_ctx, n, 16).repartition(4)
    sink = DyingSink(str(out), COLUMNS, size_limit=1 << 12)
    ds.write_datasink(sink)
    assert os.path.exists(marker), "the first attempt of task 1 did not die"
    assert _ids(LocalDataset(str(out))) == list(range(n))
    assert not [e for e in os.listdir(out) if e.startswith(".")]


def test_bad_arguments_and_overwrite(ray_ctx: Any, tmp_path: Path) -> None:
    from astream.ray import MDSDatasink

    with pytest.raises(ConfigError, match="compression"):
        MDSDatasink(str(tmp_path / "x"), COLUMNS, compression="lzma")
    with pytest.raises(ConfigError, match="encoding"):
        MDSDatasink(str(tmp_path / "x"), {"id": "int65"})
    out = str(tmp_path / "o")
    _dataset(ray_ctx, 100, 2).write_datasink(MDSDatasink(out, COLUMNS))
    _dataset(ray_ctx, 10, 1).write_datasink(MDSDatasink(out, COLUMNS, exist_ok=True))
    assert _ids(LocalDataset(out)) == list(range(10))


def test_cli_convert_engine_ray(ray_ctx: Any, tmp_path: Path) -> None:
    import argparse

    import pyarrow as pa
    import pyarrow.parquet as pq

    from astream.cli import convert

    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": list(range(300)), "text": [f"t{i}" for i in range(300)]}), src)
    p = argparse.ArgumentParser()
    convert.add_parser(p.add_subparsers())
    out = tmp_path / "out"
    args = p.parse_args(["convert", str(src), str(out), "--engine", "ray", "--workers", "2"])
    assert args.func(args) == 0
    rows = sorted(LocalDataset(str(out)), key=lambda s: int(s["id"]))
    assert [int(r["id"]) for r in rows] == list(range(300)) and rows[5]["text"] == "t5"
