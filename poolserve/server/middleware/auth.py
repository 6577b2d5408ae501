"""API keys: `Authorization: Bearer KEY` on every API route, compared in constant time.

`/health` (and `/metrics`, unless protected) stay open for probes and scrapers, the API docs
and the playground page for browsers (they hold no secret). A pure ASGI
middleware: a refused request costs no routing, parsing or validation. Keys are never logged.
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from poolserve.admission.api_keys import bearer_matches
from poolserve.server.error_responses import error_response

OPEN_PATHS = frozenset({"/health", "/metrics"})


def unauthorized_response() -> Response:
    return error_response(
        401,
        "missing or wrong API key; send the header `Authorization: Bearer <key>`",
        headers={"www-authenticate": "Bearer"},
    )


class BearerAuthMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        *,
        api_keys: Iterable[str],
        open_paths: frozenset[str] = OPEN_PATHS,
        open_prefixes: tuple[str, ...] = (),
        open_reads: frozenset[str] = frozenset(),
    ) -> None:
        """`open_paths` and `open_prefixes` take any method without a key; `open_reads` only
        GET and HEAD (`GET /` leads to the playground, `POST /` is an API route)."""
        self.app = app
        self._keys = [key.encode() for key in api_keys]
        self._open_paths = open_paths
        self._open_prefixes = open_prefixes
        self._open_reads = open_reads

    def _authorized(self, scope: Scope) -> bool:
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                return bearer_matches(value, self._keys)
        return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if (
            scope["type"] != "http"
            or path in self._open_paths
            or path.startswith(self._open_prefixes)
            or (path in self._open_reads and scope.get("method") in ("GET", "HEAD"))
            or self._authorized(scope)
        ):
            await self.app(scope, receive, send)
            return
        await unauthorized_response()(scope, receive, send)
