"""Counters and histograms by label that cost a request almost nothing to touch.

Every request adds to six series (its route's count and duration, its four stages' times).
prometheus_client's `labels(...)` checks and stringifies the values and takes a lock per call,
and a histogram's `observe` walks the bucket bounds in Python taking a lock per bucket it adds
to: together about 30 µs of the event loop's CPU per one-sentence request at c=64, as much as
everything the loop does for the request beyond parsing HTTP twice over. Here a series is found
by its label values in a dict (`series(...)`, kept by the caller where it can be), and an
observation is a bisect and two additions under one lock. Each family is a registry collector
that writes what prometheus_client's own `Counter` and `Histogram` write (`_total` or
`_bucket`/`_count`/`_sum`, and `_created`).
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString


class CountSeries:
    """One counter series."""

    __slots__ = ("_lock", "created", "value")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.created = time.time()
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        with self._lock:
            self.value += amount


class HistogramSeries:
    """One histogram series: a count per bucket (the last one's bound is +Inf) and the sum."""

    __slots__ = ("_bounds", "_lock", "counts", "created", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self._lock = threading.Lock()
        self.created = time.time()
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        # The first bound >= value: the bucket `le` that value falls in.
        index = bisect.bisect_left(self._bounds, value)
        with self._lock:
            self.counts[index] += 1
            self.sum += value

    def snapshot(self) -> tuple[list[int], float]:
        with self._lock:
            return list(self.counts), self.sum


class _Family(Collector):
    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        registry: CollectorRegistry | None,
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._lock = threading.Lock()
        if registry is not None:
            registry.register(self)

    def _labels(self, values: tuple[str, ...]) -> tuple[str, ...]:
        """The label values of a new series, checked (a series is found by them as given: pass
        strings)."""
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, got {values}")
        return tuple(str(value) for value in values)


class CounterFamily(_Family):
    """A counter by label values (`CounterFamily(...).series(a, b).inc()`)."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        *,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self._series: dict[tuple[str, ...], CountSeries] = {}
        super().__init__(name, documentation, labelnames, registry)

    def series(self, *values: str) -> CountSeries:
        found = self._series.get(values)
        if found is None:
            with self._lock:
                found = self._series.setdefault(self._labels(values), CountSeries())
        return found

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        with self._lock:
            series = list(self._series.items())
        for labels, each in series:
            family.add_metric(labels, each.value, created=each.created)
        yield family


class HistogramFamily(_Family):
    """A histogram by label values (`HistogramFamily(...).series(a, b).observe(seconds)`)."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        *,
        buckets: Sequence[float],
        registry: CollectorRegistry | None = None,
    ) -> None:
        bounds = tuple(sorted(float(bound) for bound in buckets if bound != float("inf")))
        self._bounds = bounds
        # The `le` labels, written as prometheus_client writes them (1.0, 2.5, +Inf).
        self._les = [*(floatToGoString(bound) for bound in bounds), "+Inf"]  # type: ignore[no-untyped-call]
        self._series: dict[tuple[str, ...], HistogramSeries] = {}
        super().__init__(name, documentation, labelnames, registry)

    def series(self, *values: str) -> HistogramSeries:
        found = self._series.get(values)
        if found is None:
            with self._lock:
                found = self._series.setdefault(self._labels(values), HistogramSeries(self._bounds))
        return found

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        with self._lock:
            series = list(self._series.items())
        for labels, each in series:
            counts, total = each.snapshot()
            cumulative, running = [], 0
            for bound, count in zip(self._les, counts, strict=True):
                running += count
                cumulative.append((bound, float(running)))
            family.add_metric(labels, cumulative, total)
            named = dict(zip(self.labelnames, labels, strict=True))
            family.add_sample(f"{self.name}_created", named, each.created)
        yield family
