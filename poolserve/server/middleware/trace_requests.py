"""HTTP requests traced (`--otlp-endpoint`; observe/tracing.py): the marks of each POST the
sampling wants (the routes that do work; not probes and scrapes) handed to the tracer once its
answer has gone.
Added only when tracing is on, inside the metrics middleware (the request's id is known),
outside the door (its wait is measured)."""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from poolserve.observe.tracing import RequestMarks, Tracing
from poolserve.server.scope_keys import (
    ADMITTED_KEY,
    CONTEXT_KEY,
    MODEL_KEY,
    REQUEST_ID_KEY,
    SAMPLED_KEY,
)

TRACE_HEADERS = (b"traceparent", b"tracestate")


class TraceRequestsMiddleware:
    def __init__(self, app: ASGIApp, *, tracing: Tracing, routes: frozenset[str]) -> None:
        self.app = app
        self.tracing = tracing
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] != "POST"
            or not (scope.get(SAMPLED_KEY) or self.tracing.wants(traceparent_of(scope)))
        ):
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_and_note(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            self.tracing.record(self._marks(scope, started, status))

    def _marks(self, scope: Scope, started: float, status: int) -> RequestMarks:
        path = scope["path"]
        route = path if path in self.routes else "other"
        carrier = {
            name.decode(): value.decode("latin-1")
            for name, value in scope.get("headers", ())
            if name in TRACE_HEADERS
        }
        return RequestMarks(
            name=f"{scope['method']} {route}",
            started=started,
            carrier=carrier,
            attributes={
                "http.request.method": scope["method"],
                "http.route": route,
                "http.response.status_code": status,
                "poolserve.request_id": scope.get(REQUEST_ID_KEY, ""),
                "poolserve.model": scope.get(MODEL_KEY, ""),
            },
            admitted=scope.get(ADMITTED_KEY),
            ended=time.perf_counter(),
            ctx=scope.get(CONTEXT_KEY),
            error=f"HTTP {status}" if status >= 500 else None,
        )


def traceparent_of(scope: Scope) -> str | None:
    """The request's traceparent header (its first), or None."""
    for name, value in scope.get("headers", ()):
        if name == b"traceparent":
            text: str = value.decode("latin-1")
            return text
    return None
