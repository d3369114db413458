"""astream's benchmark harness: astream beside mosaicml-streaming and litdata, same data, same run.

Entry point: ``python -m benchmarks.run`` (see docs/benchmarks.md).
"""
