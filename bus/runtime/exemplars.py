"""Exemplars of the latency histograms: the trace id of a recent observation in each bucket.

prometheus-client keeps exemplars in a process's own registry but not in multiprocess mode
(the files of ``PROMETHEUS_MULTIPROC_DIR`` hold numbers only), which is how ``hookbus up``
runs. The gateway, which observes the decision latency, keeps them here instead: the latest
traced observation per series and bucket. They are written only in the OpenMetrics exposition
(``Accept: application/openmetrics-text``); the classic text format never carries them.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import exposition
from prometheus_client.registry import Collector
from prometheus_client.samples import Exemplar, Sample


class Exemplars:
    """The latest exemplar per histogram series and bucket, attached to samples when asked."""

    def __init__(self) -> None:
        #: ``(family name, label values, bucket's le)`` -> exemplar.
        self.latest: dict[tuple[str, tuple[str, ...], str], Exemplar] = {}
        self._lock = threading.Lock()  # rendered from the metrics server's threads too

    def note(self, family: Histogram, labels: tuple[str, ...], value_s: float, trace_id: str) -> None:
        """Remember ``trace_id`` as the exemplar of the bucket ``value_s`` falls in."""
        bounds: list[float] = family._upper_bounds
        bound = bounds[bisect.bisect_left(bounds, value_s)]
        le = "+Inf" if bound == float("inf") else repr(float(bound))
        exemplar = Exemplar({"trace_id": trace_id}, value_s, time.time())
        with self._lock:
            self.latest[(family._name, labels, le)] = exemplar

    def attached(self, families: Iterable[Metric], label_names: dict[str, tuple[str, ...]]) -> Iterator[Metric]:
        """``families`` with each noted exemplar on its bucket sample (``label_names``: a family's labels)."""
        with self._lock:
            latest = dict(self.latest)
        for family in families:
            names = label_names.get(family.name)
            if names is None or not latest:
                yield family
                continue
            samples = []
            for sample in family.samples:
                exemplar = None
                if sample.name.endswith("_bucket"):
                    values = tuple(sample.labels.get(name, "") for name in names)
                    exemplar = latest.get((family.name, values, _le(sample.labels.get("le", ""))))
                samples.append(sample._replace(exemplar=exemplar) if exemplar else sample)
            family.samples = samples
            yield family


def _le(text: str) -> str:
    try:
        bound = float(text)
    except ValueError:
        return text
    return "+Inf" if bound == float("inf") else repr(bound)


class WithExemplars(Collector):
    """A collector yielding another registry's families with the exemplars attached."""

    def __init__(self, source: Any, exemplars: Exemplars, label_names: dict[str, tuple[str, ...]]) -> None:
        self.source = source
        self.exemplars = exemplars
        self.label_names = label_names

    def collect(self) -> Iterable[Metric]:
        return list(self.exemplars.attached(self.source.collect(), self.label_names))


OPENMETRICS_CONTENT_TYPE = exposition.CONTENT_TYPE_LATEST
#: The histograms that carry exemplars, and their label names.
WITH_EXEMPLARS: dict[str, tuple[str, ...]] = {"hookbus_decision_latency_seconds": ("event",)}


def openmetrics_text(registry: Any, exemplars: Exemplars) -> bytes:
    """``registry``'s families in the OpenMetrics exposition, with ``exemplars`` on their buckets."""
    shown = CollectorRegistry(auto_describe=False)
    shown.register(WithExemplars(registry, exemplars, WITH_EXEMPLARS))
    return bytes(exposition.generate_latest(shown))  # type: ignore[no-untyped-call]


__all__ = [
    "OPENMETRICS_CONTENT_TYPE",
    "WITH_EXEMPLARS",
    "Exemplar",
    "Exemplars",
    "Sample",
    "WithExemplars",
    "openmetrics_text",
]
