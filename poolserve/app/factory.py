"""`create_app`: a pure factory from the served models and a server config to the serving
process: the serving state every front end shares, and over it the FastAPI application behind
poolserve's own edge (server/edge.py) with the Batch API, and the gRPC front end where
`--grpc-port` asks, started and stopped with the app's lifespan."""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from fastapi import FastAPI
from fastapi_offline import FastAPIOffline

from poolserve._environment import cache_dir
from poolserve._version import __version__
from poolserve.admission.budget import bytes_per_token, sized_bound_message, sized_for
from poolserve.admission.control import AdmissionControl
from poolserve.admission.tickets import BODY_BYTES_PER_TOKEN
from poolserve.config import ServerConfig
from poolserve.config.server_config import MAX_BATCH_FILE_LINES
from poolserve.errors import SettingError
from poolserve.inputs.image_processor import image_held_bytes
from poolserve.inputs.images.fetch import MediaFetcher
from poolserve.inputs.images.policy import MediaPolicy
from poolserve.observe.metrics import Metrics
from poolserve.observe.tracing import TraceCollector, TraceSampling, Tracing
from poolserve.server.batch_api.batch_service import BatchService
from poolserve.server.batch_api.line_calls import LineCaller
from poolserve.server.batch_api.stored_files import FileLimits
from poolserve.server.edge import DOCS_ASSETS, open_edge
from poolserve.server.error_responses import install_error_handlers
from poolserve.server.routes import COMMON_ROUTES, model_routes, routers_for
from poolserve.service.model_service import ModelService
from poolserve.service.registry import ServiceRegistry
from poolserve.serving.serving_state import ServingState
from poolserve.serving.shutdown import GracePeriod

if TYPE_CHECKING:
    from poolserve.tei_grpc.front_end import GrpcFrontEnd

logger = logging.getLogger("poolserve")


def largest_request_tokens(
    config: ServerConfig, models: ServiceRegistry, per_token_bytes: int
) -> int:
    """The most one request can cost: its inputs at the longest model's length, its body at
    one token per `BODY_BYTES_PER_TOKEN` bytes (it is held until the answer: what images'
    base64 bytes weigh), or its images at what their pixels hold."""
    images = max(
        (
            config.max_images_per_request
            * max(vision.image_tokens, math.ceil(image_held_bytes(vision) / per_token_bytes))
            for service in models
            if (vision := service.core.model.layout.vision) is not None
        ),
        default=0,
    )
    return max(
        config.max_client_batch_size * max(s.max_model_len for s in models),
        math.ceil(config.max_request_bytes / BODY_BYTES_PER_TOKEN),
        images,
    )


def create_app(
    models: ServiceRegistry | ModelService, config: ServerConfig | None = None
) -> FastAPI:
    """The application serving `models` (which its caller closes): a registry of models, or
    one model. Every setting is checked here, and nothing here needs the models loaded: a
    server builds its app before they load.

    With one model, `config.served_model_name` names it; with several, each has its own."""
    config = config or ServerConfig()
    if isinstance(models, ModelService):
        if config.served_model_name:
            models = replace(models, served_names=config.served_model_name)
        models = ServiceRegistry.serving(models)
    elif config.served_model_name:
        raise SettingError(
            "--served-model-name names one model; a set of models names each in its own config"
        )
    config = _sized(config, models)
    media = MediaPolicy.of_server(config)
    fetcher = MediaFetcher(media) if config.allowed_media_domains else None
    app = FastAPIOffline(  # /docs and /redoc with their assets from the package, no CDN
        title="poolserve",
        version=__version__,
        lifespan=_lifespan,
        static_url=DOCS_ASSETS,
        # poolserve traces with its own provider (--otlp-endpoint): FastAPI's own spans off,
        # so a global provider neither doubles them nor costs each request a look-up.
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    admission = _admission(config, models)
    routes = tuple(model_routes(service.tasks) for service in models)
    served_routes = tuple(dict.fromkeys(path for each in routes for path in each))
    metrics = Metrics(models, admission, routes=(*COMMON_ROUTES, *served_routes))
    tracing = _tracing(config, metrics)
    app.state.serving = ServingState(
        models,
        routes,
        admission,
        metrics,
        GracePeriod(config.shutdown_timeout),
        created=int(time.time()),
        max_client_batch_size=config.max_client_batch_size,
        request_timeout=config.request_timeout,
        gzip_min_bytes=config.gzip_min_bytes,
        max_request_bytes=config.max_request_bytes,
        media=media,
        fetcher=fetcher,
        tracing=tracing,
    )
    app.state.grpc = _grpc_front_end(config, app.state.serving)
    app.state.batches = _batch_service(config, served_routes, metrics)
    routers = routers_for([service.tasks for service in models])
    install_error_handlers(app)
    for each in routers:
        app.include_router(each)
    open_edge(app, config, [route for each in routers for route in each.routes], app.state.serving)
    return app


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    """While the app serves: the loop-lag sampler and the live history run; the image
    fetcher's connections close after."""
    serving: ServingState = app.state.serving
    grpc: GrpcFrontEnd | None = app.state.grpc
    batches: BatchService = app.state.batches
    serving.metrics.loop_lag.start()
    serving.metrics.live.start(serving.cpu)
    if grpc is not None:
        await grpc.start()
    admission = serving.admission

    def crowded() -> bool:
        """Whether interactive requests (the default lane and above) hold admitted work."""
        return admission.admitted_tokens > admission.admitted_background

    await batches.start(
        LineCaller(app.state.inner, app),
        admission.departures.next,
        crowded,
    )
    # Told to stop, the batches take no more lines; those in flight finish in the grace period.
    serving.grace.begun().add_done_callback(lambda _: batches.drain())
    try:
        yield
    finally:
        await batches.stop(serving.grace.seconds_left())
        if grpc is not None:
            await grpc.stop()
        serving.metrics.live.stop()
        serving.metrics.loop_lag.stop()
        if serving.fetcher is not None:
            await serving.fetcher.aclose()
        if serving.tracing is not None:
            await asyncio.to_thread(serving.tracing.close)


def _tracing(config: ServerConfig, metrics: Metrics) -> Tracing | None:
    """The tracer (--otlp-endpoint; OTEL_SDK_DISABLED=true turns it off), its span counts in
    /metrics; None when off."""
    if config.otlp_endpoint is None or os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return None
    sampling = TraceSampling.configured(config.trace_sample_ratio)
    tracing = Tracing(config.otlp_endpoint, config.otlp_service_name, sampling)
    metrics.registry.register(TraceCollector(tracing))
    return tracing


def _batch_service(
    config: ServerConfig, served_routes: tuple[str, ...], metrics: Metrics
) -> BatchService:
    """The Batch API's files and batches, under --batch-dir: the folder claimed now (a second
    server on a chosen one is refused here), read when the app starts."""
    limits = FileLimits(
        file_bytes=config.max_batch_file_bytes,
        file_lines=MAX_BATCH_FILE_LINES,
        folder_bytes=config.max_batch_dir_bytes,
        retention=config.batch_retention_hours * 3600,
    )
    directory = Path(config.batch_dir) if config.batch_dir else cache_dir() / "batches"
    service = BatchService(directory.expanduser(), limits, served_routes, metrics.registry)
    service.claim(chosen=config.batch_dir is not None)
    return service


def _grpc_front_end(config: ServerConfig, serving: ServingState) -> GrpcFrontEnd | None:
    """The gRPC front end (--grpc-port), started with the app; None when off."""
    if config.grpc_port is None:
        return None
    try:
        from poolserve.tei_grpc.front_end import GrpcFrontEnd
    except ImportError as exc:
        raise SettingError(
            f"--grpc-port needs gRPC ({exc.name} is not installed): pip install 'poolserve[grpc]'"
        ) from None
    return GrpcFrontEnd(serving, f"{config.host}:{config.grpc_port}", api_keys=config.api_keys)


def _sized(config: ServerConfig, models: ServiceRegistry) -> ServerConfig:
    """`config` with its admission bound sized from memory (where none was given, with one
    log line), its limits checked against the models' lengths."""
    max_model_len = max(service.max_model_len for service in models)
    outputs = [service.output_floats for service in models]
    sized = sized_for(config, outputs, max_model_len)
    if sized is not config:
        logger.info(
            sized_bound_message(sized.queued_tokens, sized.max_concurrent_requests, outputs)
        )
    sized.check_limits(max_model_len)
    return sized


def _admission(config: ServerConfig, models: ServiceRegistry) -> AdmissionControl:
    """Admission over the models' engines: their bytes held priced at the costliest model's
    bytes per token, their measured rates in admission's tokens."""
    per_token_bytes = max(bytes_per_token(*service.output_floats) for service in models)

    def token_rate() -> float:
        """What the engines run a second, in admission's tokens."""
        rates = [service.core.stats.work_rate() for service in models]
        return sum(tokens + held / per_token_bytes for tokens, held in rates)

    return AdmissionControl(
        token_rate,
        bytes_per_token=per_token_bytes,
        max_requests=config.max_concurrent_requests,
        max_tokens=config.queued_tokens,
        max_request_tokens=config.request_tokens,
        largest_request_tokens=largest_request_tokens(config, models, per_token_bytes),
        # A request past its time limit would get its 504 once admitted: it waits no longer.
        max_wait=min(config.max_admission_wait, config.request_timeout or math.inf),
        background_share=config.background_share,
    )
