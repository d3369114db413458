"""Metrics a trainer can read: counters of every process, exported to Prometheus or
OpenTelemetry, and ``astream top``.

Theory of operation
-------------------
Counting happens in the dataset (:class:`~astream.runtime.stats.Stats`, plain int adds, one
per process); everything else is opt-in through :class:`Metrics`:

- :mod:`astream.metrics.record`: one process's figures as a JSON-able record;
- :mod:`astream.metrics.collect`: :class:`Metrics`, which bridges DataLoader workers' records
  to the main process through files, logs a summary line, serves an endpoint, hands out a
  ``prometheus_client`` collector and the OpenTelemetry instruments;
- :mod:`astream.metrics.families`: the catalogue of metric families (names, kinds, labels)
  and their values for one rank, which every exporter translates;
- :mod:`astream.metrics.prometheus`: the text exposition and the HTTP endpoint;
- :mod:`astream.metrics.otel`: OpenTelemetry observable instruments (``astream[otel]``);
- :mod:`astream.metrics.registry`: the per-node directory where ``astream top`` finds jobs.

May import: the runtime (the cache's scan), astream.errors, the package root (its version), and
an exporter's library inside the module that needs it (prometheus_client, opentelemetry).
Nothing below imports it: the dataset counts in :class:`~astream.runtime.stats.Stats`.
tests/test_layers.py checks it.
"""

from astream.metrics.collect import Metrics
from astream.metrics.record import COUNTERS, PREFETCH, process_record, process_snapshot

__all__ = ["COUNTERS", "PREFETCH", "Metrics", "process_record", "process_snapshot"]
