"""Parquet as a source of virtual shards: the index, footers, page reads and decoding.

Two layers, told apart by the module name:

- pure (like ``astream/core``: no store, no cache directory, no asyncio; numpy and msgspec,
  pyarrow imported lazily): ``thrift`` (the compact protocol of footers and page headers),
  ``table`` (the index model and its row-group virtual shards), ``published`` (the index
  ``astream index`` writes next to the data), ``compact`` (the index astream caches for
  itself), ``pages`` (page locations and one-page files), ``arrow`` (pyarrow's view of an
  indexed file), ``values`` (decoded columns as sample values), ``batches`` (columnar batches);
- ``io_*`` (runtime level: they read through the ObjectStore or the cache directory):
  ``io_footers`` (footer reads), ``io_index`` (listing, caching and loading a table's index),
  ``io_rowgroup`` (fetching and decoding a row group, the decode shared by a node's
  processes), ``io_pages`` (a few rows read by pages).

A pure module never imports an ``io_*`` one; ``tests/test_layers.py`` checks both rules.
"""
