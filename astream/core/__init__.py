"""The pure core: encodings, the shard and index models, compression and hashes, a stream's
configuration, the sample order (world, partition, shuffle, mixing) and the cache policy.

May import: the standard library, numpy, msgspec, the compression and hash libraries of the
base install, astream.errors and other core modules. No store, no socket, no asyncio, no torch,
and no file I/O beyond reading a local file it is handed: each function is a function of its
arguments, so the planner, the tests and any process may run it. tests/test_layers.py checks
these imports.
"""
