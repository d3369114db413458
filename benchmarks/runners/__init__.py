"""One runner per library. Each is a process: ``python -m benchmarks.runners.<lib> SPEC_JSON``.

A runner performs exactly one scenario described by the JSON spec and prints one line
``RESULT {json}``. The peers' runners execute in the peers' venv; they may import only
numpy, torch, their own library and this package's pure helpers (workloads, collate, common).
"""
