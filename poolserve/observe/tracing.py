"""OpenTelemetry traces (`--otlp-endpoint`): one span per request on every front end, with a
child span per stage (admission wait, tokenize, queue, each batch's inference, post-processing),
continuing the caller's W3C `traceparent`.

Which requests are traced is decided at the front end, before any mark is kept
(`TraceSampling`): a request whose caller sent a `traceparent` is traced as the caller says
(sampled or not), and of the others a share (`--trace-sample-ratio`, 0.1 by default; 1 traces
every request). Measured on a busy server, tracing every request cost about a quarter of its
rate, a tenth of them about 4 % (docs/benchmarks.md). Where OTEL_TRACES_SAMPLER is set and the
flag is not, every request's marks go to the SDK and its sampler decides.

Nothing here runs on the request's path: a front end hands over the marks it took anyway (a
`RequestMarks`, once the answer is built), and the spans are made from them, with their real
start and end times, on a thread of their own, woken once per batch of requests (at most
MOST_WAITING requests wait for it; more are dropped and counted). The SDK's batch processor
exports them from its own thread over OTLP/gRPC. Its queue is bounded
(OTEL_BSP_MAX_QUEUE_SIZE): a span that would overflow it is dropped and counted (`/metrics`),
so a slow or dead collector never slows or fails a request. The SDK reads the standard OTEL_*
variables (the exporter's headers, timeout and certificates, the sampler, the batch sizes,
resource attributes); when OTEL_SDK_DISABLED is true nothing is traced. The SDK is imported
only when tracing is on.
"""

from __future__ import annotations

import logging
import os
import random
import re
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from poolserve.engine.context import ServeContext
from poolserve.errors import SettingError

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Tracer

    from poolserve.observe.span_export import SpanCounts

logger = logging.getLogger("poolserve")

# The request's id and model, as attributes of its span.
REQUEST_ID = "poolserve.request_id"
MODEL = "poolserve.model"
# Seconds the exporter may take to send what is queued when the server stops.
CLOSE_SECONDS = 2.0
# Inference spans per request; a long request's further batches are summed in the last.
MOST_BATCH_SPANS = 32
# Requests whose spans wait to be made; more are dropped (and counted).
MOST_WAITING = 4096
# The span maker takes the requests waiting in batches of this many, or what came within
# LINGER seconds of the first: under load it wakes every LINGER seconds, not every request
# (a wake-up costs the request's thread a system call).
MAKE_AT_ONCE = 64
LINGER = 0.05
# The share of requests without a caller's traceparent that are traced by default.
DEFAULT_SAMPLE_RATIO = 0.1
# A W3C traceparent: version, trace id, parent id, flags (later versions may add fields).
TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
NO_TRACE_ID, NO_SPAN_ID = "0" * 32, "0" * 16


@dataclass(frozen=True)
class TraceSampling:
    """Which requests are traced: those whose caller's traceparent says sampled, and
    `ratio` of those without a valid one; `ratio` None: every request, the SDK's sampler
    (OTEL_TRACES_SAMPLER) deciding later."""

    ratio: float | None

    @classmethod
    def configured(cls, ratio: float | None) -> TraceSampling:
        """`--trace-sample-ratio` where given, else the SDK's sampler where OTEL_TRACES_SAMPLER
        names one, else DEFAULT_SAMPLE_RATIO."""
        if ratio is None and os.environ.get("OTEL_TRACES_SAMPLER"):
            return cls(None)
        return cls(DEFAULT_SAMPLE_RATIO if ratio is None else ratio)

    def wants(self, traceparent: str | None) -> bool:
        """Whether to trace a request that came with `traceparent` (None: without one)."""
        if self.ratio is None:
            return True
        if traceparent is not None:
            parent = TRACEPARENT.fullmatch(traceparent.strip())
            if (
                parent is not None
                and parent[1] != "ff"
                and parent[2] != NO_TRACE_ID
                and parent[3] != NO_SPAN_ID
                and (parent[1] != "00" or parent[5] is None)
            ):
                return int(parent[4], 16) & 1 == 1
        return random.random() < self.ratio


@dataclass
class RequestMarks:
    """What a front end knows of one request when it is answered (perf_counter seconds)."""

    name: str
    started: float
    # The caller's trace context (traceparent, tracestate), as sent.
    carrier: Mapping[str, str]
    attributes: dict[str, Any] = field(default_factory=dict)
    admitted: float | None = None
    ended: float = 0.0
    ctx: ServeContext[Any] | None = None
    # Why it failed (its span's status is then ERROR), or None.
    error: str | None = None


def check_protocol() -> None:
    """Refuse an OTLP protocol other than gRPC, the one poolserve exports with."""
    for name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        protocol = os.environ.get(name)
        if protocol is not None:
            if protocol.strip().lower() != "grpc":
                raise SettingError(
                    f"{name}={protocol}: poolserve exports traces over OTLP/gRPC only; unset it "
                    "or set it to grpc (and point --otlp-endpoint at the collector's gRPC port, "
                    "4317 by default)"
                )
            return


class Tracing:
    """The tracer provider, its bounded batch processor and the OTLP exporter."""

    def __init__(
        self, endpoint: str, service_name: str | None, sampling: TraceSampling | None = None
    ) -> None:
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import SERVICE_NAME, Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased

            from poolserve.observe.span_export import bounded_spans
        except ImportError:
            raise SettingError(
                "--otlp-endpoint needs OpenTelemetry's SDK and OTLP exporter: "
                "pip install 'poolserve[otel]'"
            ) from None
        check_protocol()
        name = service_name or os.environ.get("OTEL_SERVICE_NAME") or "poolserve"
        self.sampling = sampling or TraceSampling.configured(None)
        # Sampled at the front end already (`wants`), unless the SDK's sampler decides.
        sampler = None if self.sampling.ratio is None else ParentBased(ALWAYS_ON)
        self._provider: TracerProvider = TracerProvider(
            resource=Resource.create({SERVICE_NAME: name}), sampler=sampler
        )
        self._spans = bounded_spans(OTLPSpanExporter(endpoint=endpoint))
        self._provider.add_span_processor(self._spans)
        self._tracer: Tracer = self._provider.get_tracer("poolserve")
        self.endpoint = endpoint
        # Requests waiting for their spans to be made, and those dropped because too many were.
        self._waiting: deque[RequestMarks] = deque()
        self._changed = threading.Condition()
        self._closing = False
        self.requests_dropped = 0
        self._maker = threading.Thread(target=self._make_spans, name="poolserve-traces")
        self._maker.daemon = True  # a span being made never holds up the exit
        self._maker.start()

    @property
    def counts(self) -> SpanCounts:
        return self._spans.counts

    def wants(self, traceparent: str | None) -> bool:
        """Whether a request that came with `traceparent` is traced (`TraceSampling`)."""
        return self.sampling.wants(traceparent)

    def record(self, marks: RequestMarks) -> None:
        """Hand `marks` over to be made into spans (the request's answer does not wait for
        it); dropped, and counted, while MOST_WAITING others wait."""
        with self._changed:
            if len(self._waiting) >= MOST_WAITING or self._closing:
                self.requests_dropped += 1
                return
            self._waiting.append(marks)
            # The maker waits for a first request, then for a batch (or LINGER): a request
            # does not wake it each.
            if len(self._waiting) in (1, MAKE_AT_ONCE):
                self._changed.notify()

    def _make_spans(self) -> None:
        """The span maker's thread: make each request's spans as they come, until closed."""
        while True:
            with self._changed:
                self._changed.wait_for(lambda: bool(self._waiting) or self._closing)
                self._changed.wait_for(
                    lambda: len(self._waiting) >= MAKE_AT_ONCE or self._closing, LINGER
                )
                if not self._waiting:
                    return
                ready = list(self._waiting)
                self._waiting.clear()
            said = False
            for marks in ready:
                try:
                    self._spans_of(marks)
                except Exception:  # a trace is never worth a request; say why once per batch
                    if not said:
                        logger.exception("could not make the spans of %s", marks.name)
                    said = True

    def _spans_of(self, marks: RequestMarks) -> None:
        from opentelemetry import propagate, trace

        to_ns = time.time_ns() - time.perf_counter_ns()

        def ns(seconds: float) -> int:
            return int(seconds * 1e9) + to_ns

        parent = propagate.extract(dict(marks.carrier))
        root = self._tracer.start_span(
            marks.name,
            context=parent,
            kind=trace.SpanKind.SERVER,
            attributes=marks.attributes,
            start_time=ns(marks.started),
        )
        if root.is_recording():
            inside = trace.set_span_in_context(root)
            for name, start, end, attributes in stages(marks):
                child = self._tracer.start_span(
                    name, context=inside, attributes=attributes, start_time=ns(start)
                )
                child.end(end_time=ns(end))
            if marks.error is not None:
                root.set_status(trace.Status(trace.StatusCode.ERROR, marks.error))
        root.end(end_time=ns(marks.ended))

    def close(self) -> None:
        """Make the spans of what waits and send what is queued, for at most CLOSE_SECONDS (a
        dead collector does not hold up the shutdown)."""
        deadline = time.monotonic() + CLOSE_SECONDS
        with self._changed:
            self._closing = True
            self._changed.notify()
        self._maker.join(CLOSE_SECONDS / 2)
        closing = threading.Thread(target=self._provider.shutdown, daemon=True)
        closing.start()
        closing.join(max(0.0, deadline - time.monotonic()))


class TraceCollector(Collector):
    """`/metrics`: what became of the spans (queued for export, exported, failed to export,
    dropped because the exporter's queue was full)."""

    def __init__(self, tracing: Tracing) -> None:
        self._tracing = tracing

    def collect(self) -> Iterator[Metric]:
        counts = self._tracing.counts
        spans = CounterMetricFamily(
            "poolserve_trace_spans",
            "Trace spans by outcome: queued for export, exported, failed (the collector "
            "refused them or was unreachable), dropped (the export queue was full)",
            labels=("outcome",),
        )
        for outcome in ("queued", "exported", "failed", "dropped"):
            spans.add_metric((outcome,), getattr(counts, outcome))
        yield spans
        yield CounterMetricFamily(
            "poolserve_trace_requests_dropped",
            "Requests left untraced: more were waiting for their spans to be made than the "
            "tracer holds",
            value=self._tracing.requests_dropped,
        )


Stage = tuple[str, float, float, dict[str, Any]]


def stages(marks: RequestMarks) -> list[Stage]:
    """The child spans of a request: (name, start, end, attributes), from what was marked."""
    found: list[Stage] = []
    if marks.admitted is not None:
        found.append(("admission", marks.started, marks.admitted, {}))
    ctx = marks.ctx
    if ctx is None:
        return found
    prepared = [
        (start, start + seconds)
        for start, seconds in zip(ctx.chunk_started, ctx.chunk_seconds, strict=True)
        if start
    ]
    if prepared:
        tokenized = {
            "poolserve.tokens": ctx.prompt_tokens,
            "poolserve.inputs": len(ctx.input_tokens),
        }
        found.append(("tokenize", prepared[0][0], max(end for _, end in prepared), tokenized))
    batches = [batch for batch in ctx.batches if batch.ended]
    if prepared and batches:
        found.append(("queue", prepared[0][1], batches[0].started, {}))
    found.extend(_inference(batches))
    timings = ctx.timings
    if timings.finished:
        found.append(("postprocess", timings.finished - timings.postprocess, timings.finished, {}))
    return found


def _inference(batches: Sequence[Any]) -> list[Stage]:
    """One span per batch the request ran in (the first MOST_BATCH_SPANS - 1; the rest as one)."""
    spans: list[Stage] = []
    head, rest = batches[: MOST_BATCH_SPANS - 1], batches[MOST_BATCH_SPANS - 1 :]
    for batch in head:
        spans.append(("inference", batch.started, batch.ended, _batch_attributes([batch])))
    if rest:
        ended = max(batch.ended for batch in rest)
        spans.append(("inference", rest[0].started, ended, _batch_attributes(rest)))
    return spans


def _batch_attributes(batches: Sequence[Any]) -> dict[str, Any]:
    return {
        "poolserve.batches": len(batches),
        "poolserve.batch.size": sum(batch.size for batch in batches),
        "poolserve.batch.tokens": sum(batch.tokens for batch in batches),
        "poolserve.batch.padded_tokens": sum(batch.padded_tokens for batch in batches),
    }
