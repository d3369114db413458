"""The engine sinks on a full disk (a real 256 KiB tmpfs; skipped where it cannot be mounted):
a Spark ``dataframe_to_mds`` task or a Ray ``MDSDatasink`` write task that runs out of space
fails the job with the writer's own ``StorageError`` -- its type and its message naming the
file, the bytes it needed and the bytes free -- and nothing is published: no ``index.json``
at the output (the job's parts are never merged).

One SparkSession for the Spark test and one Ray runtime for the Ray test (class-scoped, so the
JVM is gone before Ray starts)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from astream.errors import StorageError
from tests.writer import spark_frame as sf

pytestmark = pytest.mark.slow  # a JVM and a Ray runtime: over a minute

ROWS = 3000  # ~1.5 MB of hex digests (about half that once compressed) for a 256 KiB disk
NEED = re.compile(
    r"cannot write (\S+): no space left on device \((\d+) bytes needed, (\d+) bytes free there\)"
)


def _check(err: BaseException, out: str) -> None:
    found = err
    while not isinstance(found, StorageError) and found.__cause__ is not None:
        found = found.__cause__
    assert isinstance(found, StorageError), repr(err)[-2000:]
    m = NEED.search(str(found))
    assert m, str(found)[-2000:]
    assert m[1].startswith(out + os.sep), (m[1], out)
    assert int(m[3]) < int(m[2])
    assert not os.path.exists(os.path.join(out, "index.json"))


@pytest.fixture
def small_disk(tmpfs: Callable[[int], str]) -> str:
    return tmpfs(256)


class TestSpark:
    @pytest.fixture(scope="class")
    def spark(self) -> Iterator[Any]:
        yield from sf.local_spark("astream-full-disk", "local[2]", __name__)

    def test_dataframe_to_mds_on_a_full_disk(self, spark: Any, small_disk: str) -> None:
        from astream.spark import dataframe_to_mds

        df = spark.range(0, ROWS, 1, 2).selectExpr(
            "id", "concat(sha2(cast(id as string), 512), sha2(cast(-id as string), 512)) as t"
        )
        out = os.path.join(small_disk, "spark")
        with pytest.raises(StorageError) as ei:
            dataframe_to_mds(df, mds_kwargs={"out": out, "columns": {"id": "int64", "t": "str"}})
        _check(ei.value, out)


class TestRay:
    @pytest.fixture(scope="class")
    def ray(self) -> Iterator[Any]:
        import ray

        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        yield ray
        ray.shutdown()

    def test_datasink_on_a_full_disk(self, ray: Any, small_disk: str) -> None:
        from astream.ray import MDSDatasink

        ds = ray.data.from_items([{"id": i, "t": os.urandom(256).hex()} for i in range(ROWS)])
        out = os.path.join(small_disk, "ray")
        with pytest.raises(Exception) as ei:
            ds.write_datasink(MDSDatasink(out, {"id": "int64", "t": "str"}))
        _check(ei.value, out)
