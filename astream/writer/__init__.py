"""Writing datasets: MDSWriter, the split-format writers, merge_index, the upload-sink contract."""

from __future__ import annotations

from astream.writer.mds import MDSWriter
from astream.writer.merge import merge_index
from astream.writer.xsv import CSVWriter, JSONWriter, TSVWriter, XSVWriter

__all__ = ["CSVWriter", "JSONWriter", "MDSWriter", "TSVWriter", "XSVWriter", "merge_index"]
