"""An OpenTelemetry meter for a rank's metrics (``astream[otel]``).

Theory of operation
-------------------
:class:`OtelBridge` creates, on a meter named ``astream`` of the given ``MeterProvider`` (the
global one by default), one observable instrument per family of
:data:`astream.metrics.families.CATALOGUE`: an ``ObservableCounter`` for a counter, an
``ObservableGauge`` for a gauge, named as the family (``astream_samples``,
``astream_cache_bytes``...) with the same labels as attributes. Nothing is recorded on the
read path: when the SDK collects (its reader's interval, or ``collect()`` on demand), each
instrument's callback reads the families -- the main process's counters, read now, and the
workers' latest files -- so the values are those the Prometheus endpoint would serve at that
moment. One collection calls every callback in turn; the families are built once per
collection and shared by its callbacks, so the instruments of one collection agree with each
other: they are built anew when an instrument that was already served asks again (the next
collection) or when they are older than ``reuse`` seconds (0.25 by default).

Only ``opentelemetry-api`` is imported here; which SDK, reader and exporter run is the
application's choice (``opentelemetry-sdk`` ships the periodic and in-memory readers). Without
the API, asking for the meter raises :class:`~astream.errors.ConfigError` naming the extra.
After :meth:`close` the callbacks report nothing: the OpenTelemetry API cannot remove an
instrument from a meter, so a closed bridge stays registered and silent.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from astream.metrics.families import CATALOGUE, Family

__all__ = ["OtelBridge", "import_api"]


def import_api(argument: str) -> Any:
    """``opentelemetry.metrics``, or a ConfigError naming ``argument`` and the extra."""
    try:
        from opentelemetry import metrics as otel_metrics  # type: ignore[import-not-found]
    except ImportError as exc:
        from astream.errors import ConfigError

        raise ConfigError(
            f"{argument} needs OpenTelemetry, which is not installed: "
            "pip install 'astream[otel]' (opentelemetry-api and opentelemetry-sdk)"
        ) from exc
    return otel_metrics


class OtelBridge:
    """Observable instruments on ``meter_provider`` (None: the global provider) reporting
    ``produce()``'s families (:func:`astream.metrics.families.families`)."""

    def __init__(
        self,
        produce: Callable[[], list[Family]],
        meter_provider: Any = None,
        *,
        reuse: float = 0.25,
        argument: str = "otel",
    ) -> None:
        api = import_api(argument)
        from astream import __version__

        self._api = api
        self._produce = produce
        self._reuse = reuse
        self._lock = threading.Lock()
        self._cached: tuple[float, dict[str, Family]] | None = None
        self._served: set[str] = set()
        self._closed = False
        provider = meter_provider if meter_provider is not None else api.get_meter_provider()
        self.meter = provider.get_meter("astream", __version__)
        self.instruments = []
        for fam in CATALOGUE:
            create = (
                self.meter.create_observable_counter
                if fam.kind == "counter"
                else self.meter.create_observable_gauge
            )
            self.instruments.append(
                create(fam.name, callbacks=[self._callback(fam.name)], description=fam.help)
            )

    def _families(self, name: str) -> dict[str, Family]:
        with self._lock:
            now = time.monotonic()
            if self._cached is None or name in self._served or now - self._cached[0] >= self._reuse:
                self._cached = (now, {f.name: f for f in self._produce()})
                self._served = set()
            self._served.add(name)
            return self._cached[1]

    def _callback(self, name: str) -> Callable[[Any], Iterable[Any]]:
        def observe(options: Any) -> Iterable[Any]:
            if self._closed:
                return []
            fam = self._families(name)[name]
            return [self._api.Observation(v, labels) for labels, v in fam.samples]

        observe.__name__ = f"observe_{name}"
        return observe

    def close(self) -> None:
        """Report nothing from now on."""
        self._closed = True
