"""`create_app`: a pure factory from an engine and a server config to a FastAPI application."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi_offline import FastAPIOffline
from starlette.middleware.cors import CORSMiddleware

from poolserve import __version__
from poolserve.config import ServerConfig
from poolserve.offline import Engine
from poolserve.server.admission import AdmissionControl, AdmissionMiddleware
from poolserve.server.auth import BearerAuthMiddleware
from poolserve.server.body_limit import BodyLimitMiddleware
from poolserve.server.cohere_routes import cohere_router
from poolserve.server.direct_routes import DirectRouteMiddleware
from poolserve.server.errors import install_error_handlers
from poolserve.server.metrics import Metrics, MetricsMiddleware
from poolserve.server.pooling_routes import (
    classify_router,
    pooling_router,
    score_router,
    sparse_router,
)
from poolserve.server.routes import COMMON_ROUTES, embeddings_router, router
from poolserve.server.shutdown import GracePeriod
from poolserve.server.state import ServingState
from poolserve.server.tei_routes import tei_embed_router, tei_predict_router, tei_router

# The API documentation (open behind --api-key: it holds no secret, and a browser cannot send
# the key to load it; its Authorize button sets the key for the calls it tries).
DOCS_ASSETS = "/docs/assets"
DOCS_PATHS = frozenset({"/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"})
# Response headers a browser page may read (CORS hides the others).
EXPOSED_HEADERS = (
    "x-request-id",
    "x-queue-time",
    "x-inference-time",
    "x-total-time",
    "retry-after",
)


def create_app(engine: Engine, config: ServerConfig | None = None) -> FastAPI:
    """The application serving `engine` (which its caller closes)."""
    config = config or ServerConfig()
    config.check_limits(engine.max_model_len)
    names = config.served_model_name or (engine.name,)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        metrics.loop_lag.start()
        try:
            yield
        finally:
            metrics.loop_lag.stop()

    app = FastAPIOffline(  # /docs and /redoc with their assets from the package, no CDN
        title="poolserve",
        version=__version__,
        lifespan=lifespan,
        static_url=DOCS_ASSETS,
    )
    admission = AdmissionControl(
        lambda: engine.core.stats.snapshot().tokens_per_second,
        max_requests=config.max_concurrent_requests,
        max_tokens=config.max_queued_tokens,
        max_request_tokens=config.request_tokens,
        largest_request_tokens=config.max_client_batch_size * engine.max_model_len,
    )
    metrics = Metrics(engine.core, admission, routes=(*COMMON_ROUTES, *engine.tasks.routes))
    app.state.serving = ServingState(
        engine,
        tuple(names),
        admission,
        metrics,
        GracePeriod(config.shutdown_timeout),
        created=int(time.time()),
        max_client_batch_size=config.max_client_batch_size,
        request_timeout=config.request_timeout,
        gzip_min_bytes=config.gzip_min_bytes,
    )
    tasks = engine.tasks
    routers = [
        router,
        tei_router,
        *([embeddings_router, cohere_router, tei_embed_router] if tasks.embed is not None else []),
        *([classify_router, tei_predict_router] if tasks.classify is not None else []),
        *([score_router] if tasks.score is not None else []),
        *([sparse_router] if tasks.sparse else []),
        pooling_router,
    ]
    # Starlette runs the middleware added last first: metrics, auth, admission, body size, then
    # our routes dispatched directly (the rest goes on to FastAPI).
    app.add_middleware(
        DirectRouteMiddleware, routes=[route for each in routers for route in each.routes]
    )
    app.add_middleware(BodyLimitMiddleware, max_bytes=config.max_request_bytes)
    app.add_middleware(AdmissionMiddleware, control=admission)
    if config.api_keys:
        open_paths = (
            DOCS_PATHS | {"/health"} | ({"/metrics"} if not config.protect_metrics else set())
        )
        app.add_middleware(
            BearerAuthMiddleware,
            api_keys=config.api_keys,
            open_paths=frozenset(open_paths),
            open_prefixes=(DOCS_ASSETS + "/",),
        )
    if config.allowed_origins:  # outside auth: a refusal still carries the CORS headers
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(config.allowed_origins),
            allow_methods=["GET", "HEAD", "POST"],
            allow_headers=["authorization", "content-type", "x-request-id", "x-request-timeout"],
            expose_headers=[*EXPOSED_HEADERS],
            max_age=600,
        )
    app.add_middleware(  # outermost: names and counts every request, refusals included
        MetricsMiddleware, metrics=metrics, request_ids=app.state.serving.new_request_id
    )
    install_error_handlers(app)
    for each in routers:
        app.include_router(each)
    return app
