"""Priority lanes, observed (engine/lanes.py): by lane, the inputs waiting for a runner (every
model's), the requests waiting at the door, the 429s, and how long answered requests waited for a
runner; for `/stats` (`LaneWaits.report`) and `/metrics` (`LaneCollector`, labelled `priority`).
A lane shows once it has had a request."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from poolserve.admission.control import AdmissionControl
from poolserve.service.registry import ServiceRegistry


class LaneWaits:
    """Answered requests and their seconds waiting for a runner, by lane."""

    def __init__(self, models: ServiceRegistry, admission: AdmissionControl) -> None:
        self._models = models
        self._admission = admission
        self._lock = threading.Lock()
        self._requests: Counter[int] = Counter()
        self._queue_seconds: dict[int, float] = {}

    def observe(self, priority: int, queue_seconds: float) -> None:
        with self._lock:
            self._requests[priority] += 1
            self._queue_seconds[priority] = self._queue_seconds.get(priority, 0.0) + queue_seconds

    def queued_items(self) -> Counter[int]:
        """Inputs waiting for a runner by lane, every model's."""
        queued: Counter[int] = Counter()
        for service in self._models:
            queued.update(service.core.queued_by_lane())
        return queued

    def report(self) -> dict[str, dict[str, float]]:
        """`/stats`' `lanes`: each lane's figures, by priority (as a string), highest first."""
        with self._lock:
            requests, seconds = Counter(self._requests), dict(self._queue_seconds)
        queued = self.queued_items()
        waiting = self._admission.waiting_by_lane()
        refused = Counter(self._admission.refused_by_lane)
        lanes = sorted({*requests, *queued, *waiting, *refused})
        return {
            str(lane): {
                "requests": requests[lane],
                "queue_seconds": seconds.get(lane, 0.0),
                "queued_items": queued[lane],
                "requests_waiting": waiting.get(lane, 0),
                "refused": refused[lane],
            }
            for lane in lanes
        }


class LaneCollector(Collector):
    """The lanes' figures for Prometheus, read when scraped."""

    def __init__(self, waits: LaneWaits) -> None:
        self._waits = waits

    def collect(self) -> Iterator[Metric]:
        families: dict[str, CounterMetricFamily | GaugeMetricFamily] = {
            "requests": CounterMetricFamily(
                "poolserve_lane_requests", "Requests answered, by priority", labels=("priority",)
            ),
            "queue_seconds": CounterMetricFamily(
                "poolserve_lane_queue_seconds",
                "Seconds answered requests waited for a runner, in all, by priority",
                labels=("priority",),
            ),
            "queued_items": GaugeMetricFamily(
                "poolserve_lane_queue_items",
                "Inputs waiting for a runner, by priority",
                labels=("priority",),
            ),
            "requests_waiting": GaugeMetricFamily(
                "poolserve_lane_requests_waiting",
                "Requests waiting at the door for room, by priority",
                labels=("priority",),
            ),
            "refused": CounterMetricFamily(
                "poolserve_lane_refused_requests",
                "Requests refused for want of room (429), by priority",
                labels=("priority",),
            ),
        }
        for lane, figures in self._waits.report().items():
            for name, family in families.items():
                family.add_metric((lane,), figures[name])
        yield from families.values()
