"""Prometheus metrics: one registry per app (no process-global state), served at `/metrics`.

Request counts and durations come from the HTTP front end (its metrics layer,
server/middleware/metrics_layer.py, and the hot routes) and the gRPC servicer; stage times from
each request's context; queue depth and batch histograms are read from the engine at scrape
time, so the engine's threads know nothing about Prometheus.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from poolserve.admission.control import AdmissionControl
from poolserve.engine.context import ServeContext
from poolserve.observe.lane_metrics import LaneCollector, LaneWaits
from poolserve.observe.live import LiveHistory
from poolserve.observe.loop_lag import LAG_BUCKETS, LoopLagMonitor
from poolserve.observe.tallies import CounterFamily, HistogramFamily
from poolserve.service.registry import ServiceRegistry

# Statuses that mean a request was refused or abandoned, and why.
REJECTION_REASONS = {
    401: "unauthorized",
    404: "not_found",
    413: "too_large",
    429: "overloaded",
    499: "client_disconnected",
    503: "unavailable",
    504: "timeout",
}
logger = logging.getLogger("poolserve.requests")

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
BATCH_TOKEN_BUCKETS = (64, 256, 1024, 4096, 16384, 65536)


class EngineCollector(Collector):
    """Queue depth, batch histograms and runners of every model (labelled `model`, its served
    name), and admission's cost, read from their counters when scraped."""

    def __init__(self, models: ServiceRegistry, admission: AdmissionControl) -> None:
        self._models = models
        self._admission = admission

    def collect(self) -> Iterator[Metric]:
        yield from self._engine_metrics()
        yield from self._choice_metrics()
        yield from self._cache_metrics()
        admission = self._admission
        gauges = (
            (
                "poolserve_admitted_tokens",
                "What admitted requests cost, in tokens (bounded by --max-queued-tokens)",
                admission.admitted_tokens,
            ),
            (
                "poolserve_admitted_tokens_peak",
                "The most admitted requests ever cost at once, in tokens",
                admission.peak_admitted_tokens,
            ),
            (
                "poolserve_requests_in_flight",
                "Requests admitted and not answered",
                admission.in_flight,
            ),
            (
                "poolserve_requests_waiting",
                "Requests waiting at the door for room (--max-admission-wait)",
                admission.waiting,
            ),
        )
        for name, documentation, value in gauges:
            yield GaugeMetricFamily(name, documentation, value=value)

    def _choice_metrics(self) -> Iterator[Metric]:
        """What `--backend auto` measured for each model it chose for: each trial's speed and
        whether it serves."""
        labels = ("model", "engine", "precision")
        speed = GaugeMetricFamily(
            "poolserve_engine_trial_sentences_per_second",
            "Sentences per second each engine and precision ran the start-up probe at "
            "(--backend auto)",
            labels=labels,
        )
        chosen = GaugeMetricFamily(
            "poolserve_engine_chosen",
            "1 for the engine and precision --backend auto serves the model with, 0 for the others",
            labels=labels,
        )
        for service in self._models:
            choice = service.core.choice
            if choice is None:
                continue
            for trial in choice.trials:
                key = (service.served_name, trial.runtime, trial.precision)
                if trial.sentences_per_second is not None:
                    speed.add_metric(key, trial.sentences_per_second)
                serves = (trial.runtime, trial.precision) == (choice.runtime, choice.precision)
                chosen.add_metric(key, float(serves))
        yield speed
        yield chosen

    def _cache_metrics(self) -> Iterator[Metric]:
        """The result cache's counters, for the models that have one (--cache-bytes)."""
        caches = [(s.served_name, s.core.cache) for s in self._models if s.core.cache is not None]
        if not caches:
            return
        counters = {
            name: CounterMetricFamily(name, documentation, labels=("model",))
            for name, documentation, _ in CACHE_COUNTERS
        }
        size = GaugeMetricFamily(
            "poolserve_cache_bytes", "Bytes the result cache holds", labels=("model",)
        )
        for model, cache in caches:
            stats = cache.stats()
            for name, _, attribute in CACHE_COUNTERS:
                counters[name].add_metric((model,), getattr(stats, attribute))
            size.add_metric((model,), stats.bytes)
        yield from counters.values()
        yield size

    def _engine_metrics(self) -> Iterator[Metric]:
        labels = ("model",)
        gauges = {
            name: GaugeMetricFamily(name, documentation, labels=labels)
            for name, documentation in ENGINE_GAUGES
        }
        counters = {
            name: CounterMetricFamily(name, documentation, labels=("model", "runner"))
            for name, documentation, _ in PER_RUNNER
        }
        sizes = HistogramMetricFamily(
            "poolserve_batch_size", "Inputs per forward pass", labels=labels
        )
        tokens = HistogramMetricFamily(
            "poolserve_batch_tokens", "Padded tokens per forward pass", labels=labels
        )
        for service in self._models:
            core, stats, model = service.core, service.core.stats.snapshot(), service.served_name
            values = {
                "poolserve_queue_items": core.queued_items,
                "poolserve_queue_tokens": core.queued_tokens,
                "poolserve_items_skipped": stats.items_skipped,
                "poolserve_failed_batches": stats.failed_batches,
                "poolserve_runner_alive": core.alive,
                "poolserve_runners_alive": core.runners_alive,
                "poolserve_runners": core.runners,
                "poolserve_tokens_in_work": core.tokens_in_work,
                "poolserve_tokens_in_work_peak": core.peak_tokens_in_work,
                "poolserve_overlapped_batches": stats.overlapped_batches,
            }
            for name, family in gauges.items():
                family.add_metric((model,), values[name])
            for name, _, attribute in PER_RUNNER:
                for runner in stats.runners:
                    counters[name].add_metric(
                        (model, "express" if runner.express else str(runner.index)),
                        getattr(runner, attribute),
                    )
            _add_histogram(sizes, model, stats.batch_sizes, BATCH_SIZE_BUCKETS)
            _add_histogram(tokens, model, stats.batch_tokens, BATCH_TOKEN_BUCKETS)
        yield from gauges.values()
        yield sizes
        yield tokens
        yield from counters.values()


CACHE_COUNTERS = (
    ("poolserve_cache_hits", "Inputs the result cache answered without the model", "hits"),
    ("poolserve_cache_misses", "Inputs the result cache did not hold", "misses"),
    (
        "poolserve_cache_evictions",
        "Outputs the result cache let go to stay in its bound",
        "evictions",
    ),
)


ENGINE_GAUGES = (
    ("poolserve_queue_items", "Inputs waiting for the model"),
    ("poolserve_queue_tokens", "Tokens waiting for the model"),
    (
        "poolserve_items_skipped",
        "Inputs dropped before the model because their request was cancelled or failed",
    ),
    ("poolserve_failed_batches", "Forward passes that raised"),
    (
        "poolserve_runner_alive",
        "1 while at least one model runner thread is alive (the engine can serve)",
    ),
    ("poolserve_runners_alive", "Model runner threads alive"),
    ("poolserve_runners", "Model runner threads started"),
    ("poolserve_tokens_in_work", "Tokens waiting for the model or in a forward pass"),
    (
        "poolserve_tokens_in_work_peak",
        "The most tokens ever waiting for the model or in a forward pass at once",
    ),
    (
        "poolserve_overlapped_batches",
        "Forward passes that started while another runner's was running",
    ),
)
PER_RUNNER = (
    ("poolserve_runner_batches", "Forward passes run, by runner", "batches"),
    ("poolserve_runner_items", "Inputs run, by runner", "items"),
    ("poolserve_runner_failed_batches", "Forward passes that raised, by runner", "failed_batches"),
    ("poolserve_runner_busy_seconds", "Seconds spent in forward passes, by runner", "busy_seconds"),
    (
        "poolserve_runner_cpu_seconds",
        "CPU seconds the runner's own thread spent in forward passes, by runner",
        "cpu_seconds",
    ),
)


def _add_histogram(
    family: HistogramMetricFamily,
    model: str,
    counts: dict[int, int],
    buckets: tuple[int, ...],
) -> None:
    cumulative = [
        (str(bound), float(sum(count for value, count in counts.items() if value <= bound)))
        for bound in buckets
    ]
    cumulative.append(("+Inf", float(sum(counts.values()))))
    sum_value = float(sum(value * count for value, count in counts.items()))
    family.add_metric((model,), cumulative, sum_value)


class Metrics:
    """The app's metrics and their registry."""

    def __init__(
        self, models: ServiceRegistry, admission: AdmissionControl, routes: tuple[str, ...]
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.routes = frozenset(routes)
        self.requests = CounterFamily(
            "poolserve_requests",
            "HTTP requests by route, status and model (empty: refused before a model was chosen)",
            ("route", "status", "model"),
            registry=self.registry,
        )
        self.duration = HistogramFamily(
            "poolserve_request_duration_seconds",
            "Time from request to response, by route and model",
            ("route", "model"),
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.stage = HistogramFamily(
            "poolserve_stage_seconds",
            "Time requests spend in each stage (tokenize, queue, inference, postprocess), by model",
            ("stage", "model"),
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.grpc_requests = CounterFamily(
            "poolserve_grpc_requests",
            "gRPC calls (each message of a stream: one) by method, status code and model",
            ("method", "code", "model"),
            registry=self.registry,
        )
        self.rejected = Counter(
            "poolserve_rejected_requests",
            "Requests refused or abandoned, by reason",
            ("reason",),
            registry=self.registry,
        )
        self.registry.register(EngineCollector(models, admission))
        self.lanes = LaneWaits(models, admission)
        self.registry.register(LaneCollector(self.lanes))
        self.live = LiveHistory(models, admission)
        self.loop_lag = LoopLagMonitor(
            Histogram(
                "poolserve_event_loop_lag_seconds",
                "How late the event loop woke for a timer (sampled every 50 ms): time it spent "
                "on other work",
                buckets=LAG_BUCKETS,
                registry=self.registry,
            ),
            Gauge(
                "poolserve_event_loop_lag_latest_seconds",
                "The latest event-loop lag sample",
                registry=self.registry,
            ),
        )

    def route_label(self, path: str) -> str:
        """The path for known routes; one label for the rest, so clients cannot add series."""
        return path if path in self.routes else "other"

    def observe_stages(self, ctx: ServeContext[Any]) -> None:
        timings = ctx.timings
        for stage, seconds in (
            ("tokenize", timings.tokenize),
            ("queue", timings.queue),
            ("inference", timings.inference),
            ("postprocess", timings.postprocess),
        ):
            self.stage.series(stage, ctx.model_name).observe(seconds)
        self.lanes.observe(ctx.priority, timings.queue)

    def record_grpc(self, method: str, code: str, model: str, seconds: float) -> None:
        """One gRPC call answered (`method`: `/tei.v1.Embed/Embed`)."""
        self.grpc_requests.series(method, code, model).inc()
        self.duration.series(method, model).observe(seconds)
        if model:
            self.live.record(model, seconds)
        if code == "RESOURCE_EXHAUSTED":
            self.rejected.labels(REJECTION_REASONS[429]).inc()

    def record_request(
        self, method: str, path: str, model: str, status: int, started: float, request_id: str
    ) -> None:
        """Count an HTTP request for `model` (empty: none chosen) answered with `status` by
        route, status and model, and time it from `started` (perf_counter); at debug level, log
        it in one line."""
        route = self.route_label(path)
        elapsed = time.perf_counter() - started
        self.requests.series(route, str(status), model).inc()
        self.duration.series(route, model).observe(elapsed)
        if model:
            self.live.record(model, elapsed)
        if logger.isEnabledFor(logging.DEBUG):
            ms = elapsed * 1000
            logger.debug("%s %s %d %.2fms id=%s", method, path, status, ms, request_id)
        if status in REJECTION_REASONS:
            self.rejected.labels(REJECTION_REASONS[status]).inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
