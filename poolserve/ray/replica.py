"""Ray Serve: the HTTP app of `poolserve serve`, one engine per replica.

Each replica builds an `Engine` and serves `create_app(engine, server_config)` through Ray
Serve's ASGI ingress, so routes, errors, admission and metrics are the single server's, per
replica. Ray's proxy spreads requests over the replicas; a replica's own admission still
answers 429 when it is full, and Ray restarts a replica whose runner died (`check_health`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ray import serve
from ray.serve import Application
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from poolserve.config import EngineConfig, ModelConfig, ServerConfig
from poolserve.config.fields import flag_arguments, setting_keys
from poolserve.config.values import unknown_setting
from poolserve.errors import SettingError
from poolserve.ray.cluster import actor_engine_config

APP_NAME = "poolserve"
# `serve` flags a Ray Serve config file's application cannot take: Ray sets them.
RAY_OWNED = frozenset({"host", "port", "ray_address"})


class EngineReplica:
    """One replica: an engine, and (built by Ray once it exists) the app that serves it."""

    def __init__(
        self, model_config: ModelConfig, engine_config: EngineConfig, server_config: ServerConfig
    ) -> None:
        from poolserve.offline.model_engine import Engine

        self.server_config = server_config
        self.engine = Engine(model_config=model_config, engine_config=engine_config)
        self.engine_cores = engine_config.cores or os.cpu_count() or 1

    def __serve_build_asgi_app__(self) -> ASGIApp:
        from poolserve.admission.budget import sized_for
        from poolserve.app import create_app
        from poolserve.server.edge import wrap_edge
        from poolserve.server.gc_freeze import freeze_loaded_objects

        service = self.engine.service
        # Replicas share their node: each sizes its default bound from its share of the
        # node's memory, as much as of its cores.
        cores = self.engine_cores / (os.cpu_count() or 1)
        config = sized_for(
            self.server_config,
            [service.output_floats],
            service.max_model_len,
            memory_share=min(1.0, cores),
        )
        app = create_app(service, config)
        wrap_edge(app, WithoutRequestIdHeader)
        freeze_loaded_objects()  # as `poolserve serve` does: the p99 under load
        return app

    def check_health(self) -> None:
        """Ray Serve's health check: a replica whose runner died is replaced."""
        if not self.engine.alive:
            raise RuntimeError("the model runner is not running; the replica log says why")

    def __del__(self) -> None:
        # Ray runs the app's lifespan shutdown first, once the replica has drained.
        self.engine.close(timeout=self.server_config.shutdown_timeout)


class WithoutRequestIdHeader:
    """Drops the app's `x-request-id` response header: Ray's proxy passes its request id to the
    app (which answers with it) and adds the same header itself."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_without(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [
                    (name, value)
                    for name, value in message["headers"]
                    if name.lower() != b"x-request-id"
                ]
            await send(message)

        await self.app(scope, receive, send_without)


def deployment(
    model: str | None = None,
    *,
    replicas: int = 1,
    replica_cpus: float = 1.0,
    model_config: ModelConfig | None = None,
    engine_config: EngineConfig | None = None,
    server_config: ServerConfig | None = None,
    name: str = APP_NAME,
) -> Application:
    """The poolserve app as a Ray Serve application of `replicas` engines of `replica_cpus`
    CPUs each: `serve.run(deployment("BAAI/bge-small-en-v1.5", replicas=4))`.

    Each replica takes up to `server_config.max_concurrent_requests` requests at once (Ray's
    default of 5 would starve the engine's batches); beyond that Ray's proxy queues them."""
    if replicas < 1:
        raise ValueError(f"replicas must be at least 1, got {replicas}")
    if replica_cpus <= 0:
        raise ValueError(f"replica_cpus must be more than 0, got {replica_cpus}")
    model_config = ModelConfig.of(model, model_config)
    server_config = server_config or ServerConfig()
    server_config.check_limits()
    replica_class = serve.deployment(
        name=name,
        num_replicas=replicas,
        ray_actor_options={"num_cpus": replica_cpus},
        max_ongoing_requests=server_config.max_concurrent_requests,
        graceful_shutdown_timeout_s=server_config.shutdown_timeout,
        health_check_period_s=10,
        # A model that fails to load fails again: a few tries, not Ray's default of 20.
        max_constructor_retry_count=3,
    )(serve.ingress()(EngineReplica))
    return replica_class.bind(
        model_config,
        actor_engine_config(engine_config or EngineConfig(), replica_cpus),
        server_config,
    )


def build_app(args: Mapping[str, Any]) -> Application:
    """The application of a Ray Serve config file (`import_path: poolserve.ray:build_app`):
    `args` are `poolserve serve` flags by name (`model`, `replicas`, `dtype`,
    `max_queued_tokens` or `max-queued-tokens`, ...), checked as the command line checks them;
    a list value repeats its flag."""
    from poolserve.config.grammar import command_settings, configs_from_args, parse_args

    known = set(setting_keys(command_settings("serve"))) - {"models", "ray"} | {"model"}
    for key in args:
        if key.replace("-", "_") in RAY_OWNED:
            raise ValueError(
                f"poolserve.ray.build_app: `{key}` is Ray Serve's to set (http_options, the "
                "cluster it runs on), not an arg of the application"
            )
    unknown = unknown_setting(args, known, noun="arg")
    if unknown:
        raise ValueError(f"poolserve.ray.build_app: {unknown}")
    settings = {key: value for key, value in args.items() if key != "model"}
    models = [str(args["model"])] if "model" in args else []
    argv = ["serve", "--ray", *models, *flag_arguments(settings, command_settings("serve"))]
    try:
        parsed = parse_args(argv, raising=True)
    except SettingError as exc:
        raise ValueError(f"poolserve.ray.build_app: {exc.cli_message}") from None
    model_config, engine_config, server_config = configs_from_args(parsed)
    return deployment(
        replicas=parsed.replicas,
        replica_cpus=parsed.replica_cpus,
        model_config=model_config,
        engine_config=engine_config,
        server_config=server_config,
    )
