"""The metrics layer: the ASGI middleware that names every HTTP request (the client's
`x-request-id`, or a new id) and has observability count and time it (observe/metrics.py)."""

from __future__ import annotations

import time
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from poolserve.observe.metrics import Metrics
from poolserve.server.scope_keys import MODEL_KEY, REQUEST_ID_KEY


class MetricsMiddleware:
    """Names every HTTP request (the client's `x-request-id`, or a new id, sent back on every
    response, refusals included), counts it by route and status, and times it; at debug level,
    logs one line per request (method, path, status, milliseconds, request id)."""

    def __init__(self, app: ASGIApp, *, metrics: Metrics, request_ids: Callable[[], str]) -> None:
        self.app = app
        self.metrics = metrics
        self.request_ids = request_ids

    def _request_id(self, scope: Scope) -> str:
        for name, value in scope.get("headers", ()):
            if name == b"x-request-id" and 0 < len(value) <= 200:
                request_id: str = value.decode("latin-1")
                return request_id
        return self.request_ids()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500
        request_id = scope[REQUEST_ID_KEY] = self._request_id(scope)

        async def send_and_record(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = list(message.get("headers", ()))
                if not any(name == b"x-request-id" for name, _ in headers):
                    headers.append((b"x-request-id", request_id.encode("latin-1")))
                    message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_and_record)
        finally:
            self.metrics.record_request(
                scope["method"],
                scope["path"],
                scope.get(MODEL_KEY, ""),
                status,
                started,
                request_id,
            )
