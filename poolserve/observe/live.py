"""The server's recent history, for the playground's live panel (`GET /stats/history`).

Every `interval` seconds a sample: requests/s, latency percentiles, queue depth, requests in
flight, batches, mean batch size and padding efficiency (the inputs' own tokens over the tokens
their batches held), for the server and for each model; the last `keep` samples are kept in
memory. No Prometheus server is needed: the numbers come from the engines' counters and from
the requests the metrics middleware sees.

The loop's part is O(1): the middleware appends a request's model and duration to a list, and
a timer swaps that list out and hands it to the CPU pool, where the sample is computed.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from poolserve.admission.control import AdmissionControl
from poolserve.engine.cpu_pool import CpuPool
from poolserve.errors import EngineUnavailableError
from poolserve.service.registry import ServiceRegistry


@dataclass(frozen=True)
class _Counters:
    batches: int = 0
    items: int = 0
    tokens: int = 0
    padded_tokens: int = 0


class LiveHistory:
    def __init__(
        self,
        models: ServiceRegistry,
        admission: AdmissionControl,
        *,
        interval: float = 2.0,
        keep: int = 150,
    ) -> None:
        self.interval = interval
        self._models = models
        self._admission = admission
        self._samples: deque[dict[str, Any]] = deque(maxlen=keep)
        # (served name, seconds) of each request answered since the last sample (loop only).
        self._requests: list[tuple[str, float]] = []
        self.requests_total = 0
        self._lock = threading.Lock()  # one sample at a time (they run in the pool)
        self._last: dict[str, _Counters] = {}
        self._last_time = time.monotonic()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._cpu: CpuPool | None = None
        self._timer: asyncio.TimerHandle | None = None
        # Called after each sample, in the pool (a hook for tests).
        self.on_sample: Callable[[dict[str, Any]], object] | None = None

    # -- on the loop ------------------------------------------------------------------------

    def record(self, model: str, seconds: float) -> None:
        """A request for `model` was answered after `seconds` (any status)."""
        self._requests.append((model, seconds))
        self.requests_total += 1

    def start(self, cpu: CpuPool) -> None:
        """Sample every `interval` seconds on the running loop, in `cpu`."""
        self._loop = asyncio.get_running_loop()
        self._cpu = cpu
        self._last = self._counters()
        self._last_time = time.monotonic()
        self._schedule()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _schedule(self) -> None:
        assert self._loop is not None
        self._timer = self._loop.call_later(self.interval, self._tick)

    def _tick(self) -> None:
        assert self._cpu is not None
        requests, self._requests = self._requests, []
        self._schedule()
        try:
            self._cpu.submit(self.take_sample, requests)
        except EngineUnavailableError:  # shutting down: no more samples
            self.stop()

    # -- in the pool ------------------------------------------------------------------------

    def take_sample(self, requests: list[tuple[str, float]]) -> dict[str, Any]:
        """Add one sample of what happened since the last one (`requests`: the answered
        requests' models and durations); returns it."""
        with self._lock:
            now = time.monotonic()
            seconds = max(now - self._last_time, 1e-9)
            counters = self._counters()
            per_model: dict[str, dict[str, Any]] = {}
            total = _Counters()
            for service in self._models:
                name = service.served_name
                delta = _minus(counters[name], self._last.get(name, _Counters()))
                total = _plus(total, delta)
                per_model[name] = {
                    "requests_per_s": sum(1 for m, _ in requests if m == name) / seconds,
                    "queue_items": service.core.queued_items,
                    **_batch_figures(delta),
                }
            latencies = sorted(duration for _, duration in requests)
            sample = {
                "t": time.time(),
                "requests_per_s": len(requests) / seconds,
                "p50_ms": _percentile_ms(latencies, 0.50),
                "p90_ms": _percentile_ms(latencies, 0.90),
                "p99_ms": _percentile_ms(latencies, 0.99),
                "queue_items": sum(each["queue_items"] for each in per_model.values()),
                "requests_in_flight": self._admission.in_flight,
                **_batch_figures(total),
                "models": per_model,
            }
            self._samples.append(sample)
            self._last, self._last_time = counters, now
        if self.on_sample is not None:
            self.on_sample(sample)
        return sample

    def body(self) -> bytes:
        """`GET /stats/history`'s body (built in the pool)."""
        return orjson.dumps(
            {
                "interval_s": self.interval,
                "requests_total": self.requests_total,
                "samples": list(self._samples),
            }
        )

    def _counters(self) -> dict[str, _Counters]:
        counters = {}
        for service in self._models:
            stats = service.core.stats.snapshot()
            counters[service.served_name] = _Counters(
                stats.batches, stats.items, stats.tokens, stats.padded_tokens
            )
        return counters


def _minus(a: _Counters, b: _Counters) -> _Counters:
    return _Counters(
        a.batches - b.batches,
        a.items - b.items,
        a.tokens - b.tokens,
        a.padded_tokens - b.padded_tokens,
    )


def _plus(a: _Counters, b: _Counters) -> _Counters:
    return _Counters(
        a.batches + b.batches,
        a.items + b.items,
        a.tokens + b.tokens,
        a.padded_tokens + b.padded_tokens,
    )


def _batch_figures(delta: _Counters) -> dict[str, Any]:
    return {
        "batches": delta.batches,
        "mean_batch_size": delta.items / delta.batches if delta.batches else None,
        "padding_efficiency": delta.tokens / delta.padded_tokens if delta.padded_tokens else None,
    }


def _percentile_ms(ordered: list[float], q: float) -> float | None:
    """The nearest-rank percentile of sorted durations, in milliseconds; None when empty."""
    if not ordered:
        return None
    rank = max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))
    return ordered[rank] * 1000
