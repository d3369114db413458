"""Write MDS from Spark: ``from astream.spark import dataframe_to_mds`` (needs ``astream[spark]``).

The implementation lives in :mod:`astream.integrations.spark`; see its docstring and
docs/spark.md."""

from __future__ import annotations

from astream.integrations.spark import MDSPath, dataframe_to_mds
from astream.integrations.spark_types import infer_columns as infer_dataframe_schema

__all__ = ["MDSPath", "dataframe_to_mds", "infer_dataframe_schema"]
