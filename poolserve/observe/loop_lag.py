"""Event-loop lag: how late the loop wakes for a timer, sampled continuously while serving.

The project rests on the event loop never doing CPU work; this is the gauge that shows it. A timer
is due every `interval` seconds; how far past its due time it runs is the time the loop spent on
something else (a callback that ran too long, or a starved thread). Each sample goes to a
Prometheus histogram, and the latest to a gauge. Started and stopped by the app's lifespan, on
the loop it measures.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from prometheus_client import Gauge, Histogram

LAG_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


class LoopLagMonitor:
    def __init__(
        self,
        histogram: Histogram,
        latest: Gauge,
        interval: float = 0.05,
        on_sample: Callable[[float], object] | None = None,
    ) -> None:
        self._histogram = histogram
        self._latest = latest
        self._interval = interval
        # Called with each sample, on the loop (a hook for tests).
        self._on_sample = on_sample
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._due = 0.0
        self.samples = 0

    def start(self) -> None:
        """Start sampling on the running loop."""
        self._loop = asyncio.get_running_loop()
        self._schedule()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _schedule(self) -> None:
        assert self._loop is not None
        self._due = self._loop.time() + self._interval
        self._timer = self._loop.call_at(self._due, self._tick)

    def _tick(self) -> None:
        assert self._loop is not None
        lag = max(0.0, self._loop.time() - self._due)
        self._histogram.observe(lag)
        self._latest.set(lag)
        self.samples += 1
        self._schedule()
        if self._on_sample is not None:
            self._on_sample(lag)
