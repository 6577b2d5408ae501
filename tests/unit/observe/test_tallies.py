"""The request tallies write what prometheus_client's own Counter and Histogram write for the
same observations (the reference), and lose no count when several threads add at once."""

from __future__ import annotations

import re
import threading

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from poolserve.observe.metrics import LATENCY_BUCKETS
from poolserve.observe.tallies import CounterFamily, HistogramFamily

# Values on, between, below and above the bounds (a value on a bound is in that bound's bucket).
VALUES = (0.0, 0.0004, 0.001, 0.0011, 0.0025, 0.049, 0.05, 0.3, 1.0, 2.5, 29.9, 30.0, 31.0, 1e6)


def exposition(registry: CollectorRegistry) -> list[str]:
    """The registry's text, `_created` values blanked (they are wall-clock times)."""
    text = generate_latest(registry).decode()
    return sorted(re.sub(r"(_created\{.*\}) \S+", r"\1 T", text).splitlines())


def test_histogram_writes_what_prometheus_client_writes() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    histogram = HistogramFamily(
        "stage_seconds", "doc", ("stage", "model"), buckets=LATENCY_BUCKETS, registry=ours
    )
    reference = Histogram(
        "stage_seconds", "doc", ("stage", "model"), buckets=LATENCY_BUCKETS, registry=theirs
    )
    for index, value in enumerate(VALUES):
        stage = ("queue", "inference")[index % 2]
        histogram.series(stage, "m").observe(value)
        reference.labels(stage, "m").observe(value)
    assert exposition(ours) == exposition(theirs)
    assert any(line.startswith('stage_seconds_bucket{le="0.001"') for line in exposition(ours))


def test_counter_writes_what_prometheus_client_writes() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    counter = CounterFamily("requests", "doc", ("route", "status"), registry=ours)
    reference = Counter("requests", "doc", ("route", "status"), registry=theirs)
    for route, status in (("/a", "200"), ("/a", "200"), ("/b", "429"), ("/a", "400")):
        counter.series(route, status).inc()
        reference.labels(route, status).inc()
    counter.series("/b", "429").inc(2.5)
    reference.labels("/b", "429").inc(2.5)
    assert exposition(ours) == exposition(theirs)


def test_a_series_takes_as_many_labels_as_its_family() -> None:
    counter = CounterFamily("requests", "doc", ("route", "status"))
    try:
        counter.series("/a")
    except ValueError as exc:
        assert "('route', 'status')" in str(exc)
    else:
        raise AssertionError("a series with one label of two was made")


def test_threads_adding_at_once_lose_nothing() -> None:
    histogram = HistogramFamily("t", "doc", ("k",), buckets=(1.0,))
    counter = CounterFamily("c", "doc", ("k",))
    each, threads = 20_000, 4
    start = threading.Barrier(threads)

    def add() -> None:
        start.wait()
        for _ in range(each):
            histogram.series("x").observe(0.5)
            counter.series("x").inc()

    workers = [threading.Thread(target=add) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    counts, total = histogram.series("x").snapshot()
    assert counts == [each * threads, 0]
    assert total == 0.5 * each * threads
    assert counter.series("x").value == each * threads
