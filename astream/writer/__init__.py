"""Writing datasets: MDSWriter, merge_index, and the upload-sink contract."""

from __future__ import annotations

from astream.writer.mds import MDSWriter
from astream.writer.merge import merge_index

__all__ = ["MDSWriter", "merge_index"]
