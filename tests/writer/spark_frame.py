"""The DataFrame of the Spark tests and of the reference golden (scripts/gen_spark_golden.py).

Built from ``spark.range`` with SQL expressions only, so the same rows land in the same
partitions under any pyspark 4 install: one column per Spark type that maps to an MDS encoding.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

ROWS = 100_000
PARTITIONS = 4
SIZE_LIMIT = 1 << 20

EXPRS = [
    "id as i64",
    "cast(id % 128 as tinyint) as u8",
    "cast(id % 30000 as smallint) as u16",
    "cast(id * 7 % 1000003 as int) as i32",
    "cast(id / 3 as float) as f32",
    "cast(id / 7 as double) as f64",
    "cast(id / 100 as decimal(18,4)) as dec",
    "concat('row-', id, repeat('x', cast(id % 13 as int))) as s",
    "cast(concat('b', id) as binary) as bin",
    "cast(transform(sequence(0, cast(id % 4 as int)), x -> x + id % 1000) as array<smallint>)"
    " as a16",
    "cast(transform(sequence(0, cast(id % 5 as int)), x -> x + id) as array<int>) as a32",
    "cast(transform(sequence(0, cast(id % 3 as int)), x -> x * id) as array<bigint>) as a64",
    "cast(transform(sequence(0, cast(id % 6 as int)), x -> x / 4) as array<float>) as af32",
    "cast(transform(sequence(0, cast(id % 2 as int)), x -> (id + x) / 9) as array<double>) as af64",
]

COLUMNS = {
    "i64": "int64",
    "u8": "uint8",
    "u16": "uint16",
    "i32": "int32",
    "f32": "float32",
    "f64": "float64",
    "dec": "str_decimal",
    "s": "str",
    "bin": "bytes",
    "a16": "ndarray:int16",
    "a32": "ndarray:int32",
    "a64": "ndarray:int64",
    "af32": "ndarray:float32",
    "af64": "ndarray:float64",
}


def build(spark: Any, rows: int = ROWS, partitions: int = PARTITIONS) -> Any:
    """The test DataFrame: ``rows`` rows over ``partitions`` partitions, every mapped type."""
    return spark.range(0, rows, 1, partitions).selectExpr(*EXPRS)


# The arrays are cast to ``array<T>`` (containsNull=true): the reference's type table compares
# whole types, so it refuses ``ArrayType(IntegerType(), containsNull=False)``; astream does not.


def local_spark(app: str, master: str, module: str) -> Iterator[Any]:
    """A local SparkSession for a test module (UI off, 2 shuffle partitions, errors only in
    the log), its workers on this interpreter. ``module``'s functions are pickled by value:
    Spark's workers cannot import a test module by name."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark import cloudpickle
    from pyspark.sql import SparkSession

    cloudpickle.register_pickle_by_value(sys.modules[module])
    session = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
