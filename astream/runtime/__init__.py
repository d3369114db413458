"""The runtime: a dataset's configuration and index catalog, the rank's placement, the prefetch
scheduler, the fetcher, the node-wide disk cache and its leases, and the sample reader.

May import: astream.errors, the core, the loop bridge (astream.bridge), the storage layer
through its ObjectStore protocol (never a concrete backend: a store is handed in or opened by
URL), astream.parquet and other runtime modules. Never torch (placement asks torch only when
the program has imported it, through ``sys.modules``), and nothing of the API layer (dataset,
stream, packing) or above: what the runtime needs from there belongs below it, as a stream's
configuration does (astream.core.stream). tests/test_layers.py checks these imports.
"""
