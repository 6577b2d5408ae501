"""The event-loop lag gauge: a loop held by a callback shows as lag of at least that long."""

from __future__ import annotations

import asyncio
import time

import pytest
from prometheus_client import CollectorRegistry, Gauge, Histogram

from poolserve.observe.loop_lag import LAG_BUCKETS, LoopLagMonitor

pytestmark = pytest.mark.anyio

HOLD = 0.08


async def test_a_blocked_loop_shows_as_lag() -> None:
    registry = CollectorRegistry()
    histogram = Histogram("lag", "lag", buckets=LAG_BUCKETS, registry=registry)
    latest = Gauge("latest", "latest", registry=registry)
    samples: asyncio.Queue[float] = asyncio.Queue()
    monitor = LoopLagMonitor(histogram, latest, interval=0.01, on_sample=samples.put_nowait)
    monitor.start()
    try:
        await samples.get()  # the loop is free: a first sample
        held_until = time.perf_counter() + HOLD
        while time.perf_counter() < held_until:  # CPU work on the loop: what the gauge catches
            pass
        lag = await samples.get()
    finally:
        monitor.stop()
    assert lag >= HOLD - 0.01 - 0.005, lag  # held HOLD, of which up to one interval was due
    assert registry.get_sample_value("latest") == lag
    assert registry.get_sample_value("lag_count") == monitor.samples >= 2
    assert registry.get_sample_value("lag_bucket", {"le": "0.025"}) < monitor.samples
