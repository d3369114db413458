"""Writing datasets: MDSWriter, the split-format writers, merge_index, the upload-sink contract.

May import: astream.errors, the core, the loop bridge and the storage layer; not the runtime nor
the API layer: writing a dataset needs no reader. tests/test_layers.py checks it.
"""

from __future__ import annotations

from astream.writer.mds import MDSWriter
from astream.writer.merge import merge_index
from astream.writer.xsv import CSVWriter, JSONWriter, TSVWriter, XSVWriter

__all__ = ["CSVWriter", "JSONWriter", "MDSWriter", "TSVWriter", "XSVWriter", "merge_index"]
