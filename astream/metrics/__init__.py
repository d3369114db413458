"""Metrics a trainer can read: counters of every process, a Prometheus endpoint, ``astream top``.

Theory of operation
-------------------
Counting happens in the dataset (:class:`~astream.runtime.stats.Stats`, plain int adds, one
per process); everything else is opt-in through :class:`Metrics`:

- :mod:`astream.metrics.record`: one process's figures as a JSON-able record;
- :mod:`astream.metrics.collect`: :class:`Metrics`, which bridges DataLoader workers' records
  to the main process through files, logs a summary line, and serves an endpoint;
- :mod:`astream.metrics.prometheus`: the text exposition and the HTTP endpoint;
- :mod:`astream.metrics.registry`: the per-node directory where ``astream top`` finds jobs.
"""

from astream.metrics.collect import Metrics
from astream.metrics.record import COUNTERS, PREFETCH, process_record, process_snapshot

__all__ = ["COUNTERS", "PREFETCH", "Metrics", "process_record", "process_snapshot"]
