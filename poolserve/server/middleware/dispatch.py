"""Dispatching the API's own routes without FastAPI's per-request machinery.

Every route of ours is `async def endpoint(request) -> Response`: it reads and validates its own
body. FastAPI still registers them (so /docs and /openapi.json describe them), but taking a
request through FastAPI's route matching, its dependency solver (with nothing to solve), two
exit stacks and its exception middleware cost about 100 µs of event-loop CPU per request
(`benchmarks/thread_cpu.py` at c=64: 393 µs per request on the loop before, 293 after). This
pure ASGI middleware, the innermost layer of our edge (server/edge.py), looks the exact
(method, path) up in a table built from the routers the app includes and calls the endpoint
directly, mapping errors as the app's handlers do. Anything else (other methods, unknown paths,
/docs) goes on to FastAPI.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence

from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from poolserve.errors import PoolserveError
from poolserve.server.error_responses import poolserve_error_response

Endpoint = Callable[[Request], Awaitable[Response]]


def direct_endpoints(routes: Sequence[BaseRoute]) -> dict[tuple[str, str], Endpoint]:
    """(method, path) → endpoint for every route that takes the request alone and has no
    path parameters."""
    table: dict[tuple[str, str], Endpoint] = {}
    for route in routes:
        if not isinstance(route, APIRoute) or route.param_convertors:
            continue
        parameters = list(inspect.signature(route.endpoint).parameters.values())
        if len(parameters) != 1 or parameters[0].annotation not in (Request, "Request"):
            continue
        for method in route.methods or ():
            table[(method, route.path)] = route.endpoint
    return table


class DirectRouteMiddleware:
    def __init__(self, app: ASGIApp, *, routes: Sequence[BaseRoute]) -> None:
        self.app = app
        self.table = direct_endpoints(routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        endpoint = self.table.get((scope["method"], scope["path"]))
        if endpoint is None:
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive, send)
        try:
            response = await endpoint(request)
        except PoolserveError as exc:
            response = poolserve_error_response(request, exc)
        # Any other exception goes up through our outer layers (the body limit turns its own
        # into a 413) to the unexpected error's 500 (server/edge.py).
        await response(scope, receive, send)
