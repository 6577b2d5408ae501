"""Admission control: bound the work the server holds, and refuse the rest at once with 429.

Checked when a request arrives, before its body is tokenized: requests in flight against
`--max-concurrent-requests`, tokens waiting in the engine's queue against `--max-queued-tokens`.
Owned by the event loop thread (the only one that admits or releases), so it needs no lock.
"""

from __future__ import annotations

import math

from starlette.types import ASGIApp, Receive, Scope, Send

from poolserve.engine.core import EngineCore
from poolserve.errors import OverloadedError
from poolserve.server.errors import error_response


class AdmissionControl:
    def __init__(self, core: EngineCore, *, max_requests: int, max_queued_tokens: int) -> None:
        self._core = core
        self.max_requests = max_requests
        self.max_queued_tokens = max_queued_tokens
        self.in_flight = 0
        self.rejected = 0

    def _retry_after(self) -> str:
        """Seconds until the queue has drained, from the engine's measured token rate (each
        live runner's rate, summed)."""
        rate = self._core.stats.snapshot().tokens_per_second
        seconds = self._core.queued_tokens / rate if rate else 1.0
        return str(max(1, math.ceil(seconds)))

    def _refuse(self, why: str) -> OverloadedError:
        self.rejected += 1
        return OverloadedError(
            f"the server is at capacity ({why}); retry after the time in Retry-After",
            headers={"retry-after": self._retry_after()},
        )

    def refusal(self) -> OverloadedError | None:
        """Why a new request cannot be admitted now, or None."""
        if self.in_flight >= self.max_requests:
            return self._refuse(f"{self.in_flight} requests in flight")
        queued = self._core.queued_tokens
        if queued >= self.max_queued_tokens:
            return self._refuse(f"{queued} tokens queued")
        return None


class AdmissionMiddleware:
    """Every POST (the routes that do work) is admitted here, or refused before it is read."""

    def __init__(self, app: ASGIApp, *, control: AdmissionControl) -> None:
        self.app = app
        self.control = control

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        control = self.control
        refusal = control.refusal()
        if refusal is not None:
            response = error_response(refusal.status, refusal.message, headers=refusal.headers)
            await response(scope, receive, send)
            return
        control.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            control.in_flight -= 1
