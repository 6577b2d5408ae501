"""The export side of tracing (observe/tracing.py), on OpenTelemetry's SDK: the SDK's batch
processor behind a bound that counts what it drops, over an exporter that counts what it sent.
Imported only when tracing is on."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

# The SDK's own defaults for OTEL_BSP_MAX_QUEUE_SIZE and OTEL_BSP_MAX_EXPORT_BATCH_SIZE.
DEFAULT_QUEUE, DEFAULT_EXPORT_BATCH = 2048, 512


def bounded_spans(exporter: SpanExporter) -> BoundedSpans:
    """A batch processor over `exporter` holding at most OTEL_BSP_MAX_QUEUE_SIZE spans (its
    export batches no larger: the SDK refuses to start otherwise)."""
    capacity = _positive("OTEL_BSP_MAX_QUEUE_SIZE", DEFAULT_QUEUE)
    batch = min(capacity, _positive("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", DEFAULT_EXPORT_BATCH))
    counting = CountingExporter(exporter)
    processor = BatchSpanProcessor(counting, max_queue_size=capacity, max_export_batch_size=batch)
    return BoundedSpans(processor, counting, capacity)


def _positive(name: str, default: int) -> int:
    try:
        value = int(os.environ.get(name, default))
    except ValueError:
        return default
    return value if value > 0 else default


@dataclass
class SpanCounts:
    """Spans handed to the exporter's queue, exported, failed to export, and dropped because
    the queue was full."""

    queued: int = 0
    exported: int = 0
    failed: int = 0
    dropped: int = 0

    @property
    def pending(self) -> int:
        return self.queued - self.exported - self.failed


class CountingExporter(SpanExporter):
    """An exporter that counts what the one it wraps sent and failed to send."""

    def __init__(self, inner: SpanExporter) -> None:
        self._inner = inner
        self.counts = SpanCounts()
        self.lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self._inner.export(spans)
        except Exception:
            result = SpanExportResult.FAILURE
        with self.lock:
            if result is SpanExportResult.SUCCESS:
                self.counts.exported += len(spans)
            else:
                self.counts.failed += len(spans)
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


class BoundedSpans(SpanProcessor):
    """The SDK's batch processor behind a count of the spans it holds: a span that would make
    them more than its queue holds is dropped here, and counted (the processor's own drop is
    only logged)."""

    def __init__(
        self, batches: BatchSpanProcessor, exporter: CountingExporter, capacity: int
    ) -> None:
        self._batches = batches
        self._exporter = exporter
        self._capacity = capacity

    @property
    def counts(self) -> SpanCounts:
        return self._exporter.counts

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        if not (span.context and span.context.trace_flags.sampled):
            return
        counts = self._exporter.counts
        with self._exporter.lock:
            if counts.pending >= self._capacity:
                counts.dropped += 1
                return
            counts.queued += 1
        self._batches.on_end(span)

    def shutdown(self) -> None:
        self._batches.shutdown()  # type: ignore[no-untyped-call]

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._batches.force_flush(timeout_millis)
