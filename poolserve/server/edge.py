"""The edge: poolserve's own ASGI layers, in front of FastAPI's.

An HTTP request meets our layers first (metrics, tracing, the unexpected error's 500, CORS,
auth, the body limit, admission), then the API's own routes are dispatched directly
(middleware/dispatch.py). Only what no route of ours takes (other methods, unknown paths,
/docs) goes on into FastAPI's application, with its own layers (Starlette's error middleware,
FastAPI's telemetry and body-limit middleware, the router).

Added with `app.add_middleware`, ours ran inside those three layers of FastAPI's on every
request, whose frames and `send` wrappers our routes have no use for: putting ours in front
took a one-sentence request's event-loop CPU from 263-281 to 243-249 µs at c=64, with uvicorn's
proxy headers off and the spaces' fingerprints cached (docs/benchmarks.md, "The Intel Xeon with
AMX again").

Lifespan events pass through our layers to FastAPI's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from fastapi import FastAPI
from starlette.middleware.cors import CORSMiddleware
from starlette.routing import BaseRoute
from starlette.types import ASGIApp

from poolserve.config import ServerConfig
from poolserve.server.error_responses import UnexpectedErrorMiddleware
from poolserve.server.hot_routes import EdgePolicy, HotRoutes
from poolserve.server.middleware.admission_door import AdmissionMiddleware
from poolserve.server.middleware.auth import BearerAuthMiddleware
from poolserve.server.middleware.body_limit import BodyLimitMiddleware
from poolserve.server.middleware.dispatch import DirectRouteMiddleware
from poolserve.server.middleware.metrics_layer import MetricsMiddleware
from poolserve.server.middleware.trace_requests import TraceRequestsMiddleware
from poolserve.server.playground import ASSETS, PAGE
from poolserve.serving.serving_state import ServingState

# The API documentation (open behind --api-key: it holds no secret, and a browser cannot send
# the key to load it; its Authorize button sets the key for the calls it tries).
DOCS_ASSETS = "/docs/assets"
DOCS_PATHS = frozenset({"/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"})
# The Batch API's routes run no model: admitted unpriced (their lines are admitted as they run).
BATCH_API_PATHS = ("/v1/files", "/v1/batches")
# What a multipart upload carries beyond its file: boundaries and part headers.
MULTIPART_BYTES = 64 * 1024
# Response headers a browser page may read (CORS hides the others).
EXPOSED_HEADERS = (
    "x-request-id",
    "x-queue-time",
    "x-inference-time",
    "x-total-time",
    "retry-after",
)


def open_edge(
    app: FastAPI, config: ServerConfig, routes: Sequence[BaseRoute], serving: ServingState
) -> None:
    """Put our layers in front of `app`'s own (built now: call it once the routes and the
    exception handlers are in), outermost first: metrics (names and counts every request,
    refusals included), tracing (the request's id is known), the unexpected error's 500, CORS
    (outside auth: a refusal still carries the CORS headers), auth, the body size (a body too
    large for any route is refused before it waits for admission), admission, then our routes
    dispatched directly; `app.state.inner` is the stack from the body size inward (a batch's
    lines go there). In front of them all, the hot routes (server/hot_routes.py) take our
    POST routes and do the same work in one callable. Starlette calls the stack it keeps in
    `middleware_stack` (after its own `Request.app` is set); from now on `add_middleware`
    refuses: use `wrap_edge`."""
    layer: ASGIApp = DirectRouteMiddleware(app.build_middleware_stack(), routes=routes)
    layer = AdmissionMiddleware(layer, control=serving.admission, unpriced=BATCH_API_PATHS)
    upload_bytes = config.max_batch_file_bytes + MULTIPART_BYTES
    layer = BodyLimitMiddleware(
        layer,
        max_bytes=config.max_request_bytes,
        larger=(("/v1/files", upload_bytes, "--max-batch-file-bytes"),),
    )
    # A batch's lines come in here (server/batch_api/line_calls.py).
    app.state.inner = layer
    open_paths, open_prefixes = _without_key(config)
    if config.api_keys:
        layer = BearerAuthMiddleware(
            layer,
            api_keys=config.api_keys,
            open_paths=open_paths,
            open_prefixes=open_prefixes,
            open_reads=frozenset({"/"}),
        )
    if config.allowed_origins:
        layer = CORSMiddleware(
            layer,
            allow_origins=list(config.allowed_origins),
            allow_methods=["GET", "HEAD", "POST"],
            allow_headers=[
                *("authorization", "content-type", "x-request-id", "x-request-timeout"),
                *("x-priority", "x-expect-embedding-space", "traceparent", "tracestate"),
            ],
            expose_headers=[*EXPOSED_HEADERS],
            max_age=600,
        )
    # An error no handler took is answered here, its connection kept (error_responses.py).
    layer = UnexpectedErrorMiddleware(layer)
    if serving.tracing is not None:
        layer = TraceRequestsMiddleware(
            layer, tracing=serving.tracing, routes=serving.metrics.routes
        )
    layer = MetricsMiddleware(layer, metrics=serving.metrics, request_ids=serving.new_request_id)
    app.middleware_stack = HotRoutes(
        layer,
        owner=app,
        routes=routes,
        serving=serving,
        policy=_edge_policy(config, serving),
        skipped=BATCH_API_PATHS,
    )


def _edge_policy(config: ServerConfig, serving: ServingState) -> EdgePolicy:
    """What the hot routes ask of every request, as the layers above do."""
    return EdgePolicy(
        config.max_request_bytes,
        tuple(key.encode() for key in config.api_keys),
        *_without_key(config),
        cors=bool(config.allowed_origins),
        tracing=serving.tracing,
    )


def _without_key(config: ServerConfig) -> tuple[frozenset[str], tuple[str, ...]]:
    """The paths, and the prefixes of paths, that take any method without an API key."""
    open_paths = DOCS_PATHS | {"/health", PAGE}
    if not config.protect_metrics:
        open_paths |= {"/metrics"}
    return frozenset(open_paths), (DOCS_ASSETS + "/", ASSETS)


def serving_entry(app: FastAPI) -> ASGIApp:
    """What an HTTP server calls: the edge itself where it begins with the hot routes (they set
    the scope's app), past FastAPI's and starlette's own `__call__` (two coroutines more a
    request, which only set it); else `app`."""
    stack = app.middleware_stack
    return stack if isinstance(stack, HotRoutes) else app


def wrap_edge(app: FastAPI, layer: Callable[[ASGIApp], ASGIApp]) -> None:
    """Put `layer` outside `app`'s edge: every request meets it first."""
    if app.middleware_stack is None:
        raise RuntimeError("open the edge first")
    app.middleware_stack = layer(app.middleware_stack)
