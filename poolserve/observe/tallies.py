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
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Generic, TypeVar

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


S = TypeVar("S", CountSeries, HistogramSeries)


class _Family(Collector, Generic[S]):
    """Series by label values, made by `new_series` the first time their values are seen."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        registry: CollectorRegistry | None,
        new_series: Callable[[], S],
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._new_series: Callable[[], S] = new_series
        self._series: dict[tuple[str, ...], S] = {}
        self._lock = threading.Lock()
        if registry is not None:
            registry.register(self)

    def series(self, *values: str) -> S:
        """The series of these label values (found by them as given: pass strings)."""
        found = self._series.get(values)
        if found is None:
            if len(values) != len(self.labelnames):
                raise ValueError(f"{self.name} takes labels {self.labelnames}, got {values}")
            with self._lock:
                found = self._series.setdefault(tuple(map(str, values)), self._new_series())
        return found

    def _every_series(self) -> list[tuple[tuple[str, ...], S]]:
        with self._lock:
            return list(self._series.items())


class CounterFamily(_Family[CountSeries]):
    """A counter by label values (`CounterFamily(...).series(a, b).inc()`)."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        *,
        registry: CollectorRegistry | None = None,
    ) -> None:
        super().__init__(name, documentation, labelnames, registry, CountSeries)

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for labels, each in self._every_series():
            family.add_metric(labels, each.value, created=each.created)
        yield family


class HistogramFamily(_Family[HistogramSeries]):
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
        # The `le` labels, written as prometheus_client writes them (1.0, 2.5, +Inf).
        self._les = [*(floatToGoString(bound) for bound in bounds), "+Inf"]  # type: ignore[no-untyped-call]
        super().__init__(
            name, documentation, labelnames, registry, partial(HistogramSeries, bounds)
        )

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for labels, each in self._every_series():
            counts, total = each.snapshot()
            cumulative, running = [], 0
            for bound, count in zip(self._les, counts, strict=True):
                running += count
                cumulative.append((bound, float(running)))
            family.add_metric(labels, cumulative, total)
            named = dict(zip(self.labelnames, labels, strict=True))
            family.add_sample(f"{self.name}_created", named, each.created)
        yield family
