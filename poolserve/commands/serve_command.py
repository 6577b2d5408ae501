"""`poolserve serve`: the port taken first, every setting checked, the models loaded, then the
HTTP app served until SIGTERM or SIGINT, with a bounded grace period for admitted requests."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
from dataclasses import replace
from typing import TYPE_CHECKING

from poolserve.config import EngineConfig, ModelConfig, ServedModel, ServerConfig
from poolserve.config.grammar import configs_from_args
from poolserve.errors import ModelLoadError, SettingError

if TYPE_CHECKING:
    from fastapi import FastAPI

    from poolserve.engine.model_backend import BackendFactory

logger = logging.getLogger("poolserve")


def serve(args: argparse.Namespace, backend: BackendFactory | None = None) -> int:
    model_config, engine_config, server_config = configs_from_args(args)
    logging.basicConfig(
        level=server_config.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # Take the port before importing torch and loading: a port in use fails in a second, not
    # after the whole load. It listens once the models are ready.
    try:
        listener = bind_port(server_config.host, server_config.port)
    except OSError as exc:
        logger.error(
            "cannot start: cannot listen on %s:%d: %s",
            server_config.host,
            server_config.port,
            exc.strerror or exc,
        )
        return 1

    grpc_port = server_config.grpc_port
    if grpc_port is not None and args.ray:
        listener.close()
        logger.error("cannot start: --grpc-port is not served with --ray (Ray Serve's proxy)")
        return 1
    if grpc_port is not None:
        try:  # the gRPC server binds it once the models are loaded: fail now if it cannot
            bind_port(server_config.host, grpc_port).close()
        except OSError as exc:
            listener.close()
            logger.error(
                "cannot start: cannot listen for gRPC on %s:%d: %s",
                server_config.host,
                grpc_port,
                exc.strerror or exc,
            )
            return 1

    if args.ray:
        listener.close()  # free: Ray Serve's proxy listens there
        return _serve_on_ray(args, model_config, engine_config, server_config)

    # Ctrl-C while the models load exits from the signal handler itself: a KeyboardInterrupt
    # raised while the main thread runs a finalizer (a garbage collection in the middle of the
    # load) would be printed and dropped, and the load would go on. A runner may still be busy
    # loading (or compiling): its thread is left behind.
    signal.signal(signal.SIGINT, _interrupted_while_loading)
    try:
        served = served_models(args, model_config, engine_config)
        app = _loaded_app(served, server_config, engine_config.cpu_workers, backend)
    except (ModelLoadError, ValueError) as exc:
        logger.error("cannot start: %s", exc.cli_message if isinstance(exc, SettingError) else exc)
        return 1
    return _serve_app(app, listener, server_config)


def _loaded_app(
    served: list[ServedModel],
    server_config: ServerConfig,
    cpu_workers: int,
    backend: BackendFactory | None,
) -> FastAPI:
    """The app over the served models: every model prepared and the app built (every setting
    checked, the limits against the models' lengths) before any weights are downloaded, loaded
    or compiled; then the models load."""
    from poolserve.service.registry import ServiceRegistry

    models = ServiceRegistry.prepare(served, cpu_workers=cpu_workers, backend=backend)
    try:
        from poolserve.app import create_app  # after the models' checks: they refuse sooner

        app = create_app(models, replace(server_config, served_model_name=None))
    except BaseException:
        models.close()
        raise
    for each in served:
        logger.info("loading %s", each.model.model or "the bundled default model")
    models.start()
    host, port = server_config.host, server_config.port
    logger.info(
        "serving %s on http://%s:%d (playground: http://%s:%d/ui)%s%s",
        ", ".join(service.served_name for service in models),
        host,
        port,
        host,
        port,
        f"; gRPC (tei.v1) on {host}:{server_config.grpc_port}" if server_config.grpc_port else "",
        f"; traces to {server_config.otlp_endpoint}" if app.state.serving.tracing else "",
    )
    return app


def _serve_app(app: FastAPI, listener: socket.socket, server_config: ServerConfig) -> int:
    """Serve until SIGTERM or SIGINT, then give admitted requests the grace period and close
    the models; 0 once a server that started has closed cleanly."""
    import uvicorn

    from poolserve.server.edge import serving_entry
    from poolserve.server.gc_freeze import freeze_loaded_objects
    from poolserve.serving.shutdown import CLOSING_SECONDS, GracefulServer, exit_now

    grace = app.state.serving.grace
    server = GracefulServer(
        uvicorn.Config(
            serving_entry(app),
            host=server_config.host,
            port=server_config.port,
            loop="uvloop",
            http="httptools",
            log_level=server_config.log_level.lower(),
            access_log=server_config.access_log,
            # X-Forwarded-For and -Proto change only the client address the access log shows:
            # read them only for it (uvicorn's layer scans every request's headers otherwise).
            proxy_headers=server_config.access_log,
            # The handlers answer 503 when the grace period ends; uvicorn's own cut-off (which
            # cancels them) is only the last resort.
            timeout_graceful_shutdown=server_config.shutdown_timeout + CLOSING_SECONDS,
        ),
        grace,
    )
    # On SIGTERM/SIGINT uvicorn stops accepting, lets admitted requests finish and re-raises
    # the signal when done. These handlers take that re-raised signal, so a graceful shutdown
    # exits 0 instead of dying by the signal; a signal that comes while the engine closes
    # exits at once.
    for shutdown_signal in (signal.SIGTERM, signal.SIGINT):
        signal.signal(shutdown_signal, lambda signum, frame: None)
    freeze_loaded_objects()
    listener.listen(2048)
    server.run(sockets=[listener])
    for shutdown_signal in (signal.SIGTERM, signal.SIGINT):
        signal.signal(
            shutdown_signal,
            lambda signum, frame: exit_now(signum, f"{signal.Signals(signum).name} while closing"),
        )
    closed = app.state.serving.models.close(timeout=grace.seconds_left())
    if not closed:
        # A runner is stuck in a forward pass: its thread would keep the process alive.
        logging.shutdown()
        os._exit(1)
    return 0 if server.started else 1


def _interrupted_while_loading(signum: int, frame: object) -> None:
    logger.error("interrupted while loading the model; exiting")
    logging.shutdown()
    os._exit(128 + signum)


def served_models(
    args: argparse.Namespace, model_config: ModelConfig, engine_config: EngineConfig
) -> list[ServedModel]:
    """The models `serve` loads: --config's entries over the flags, or each MODEL with the
    flags' settings."""
    if args.config is not None:
        from poolserve.config.model_file import base_settings, read_model_file

        return read_model_file(args.config, base_settings(model_config, engine_config))
    given = getattr(args, "served_model_name", None)  # `compile` names no model
    names = tuple(given) if given else None
    return [
        ServedModel(replace(model_config, model=model), engine_config, names)
        for model in args.models
    ]


def _serve_on_ray(
    args: argparse.Namespace,
    model_config: ModelConfig,
    engine_config: EngineConfig,
    server_config: ServerConfig,
) -> int:
    try:
        from poolserve.ray.command_paths import serve_on_ray

        serve_on_ray(
            model_config,
            engine_config,
            server_config,
            replicas=args.replicas,
            replica_cpus=args.replica_cpus,
            address=args.ray_address,
        )
    except (ImportError, ModelLoadError, ValueError) as exc:
        logger.error("cannot start: %s", exc.cli_message if isinstance(exc, SettingError) else exc)
        return 1
    return 0


def bind_port(host: str, port: int) -> socket.socket:
    """A TCP socket bound to host:port (IPv4 or IPv6, as the host says), not listening yet:
    until it listens a client that connects is refused at once, where a listening socket
    would hold the connection in its backlog, unanswered, for the whole load."""
    family, kind, protocol, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    listener = socket.socket(family, kind, protocol)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(address)
    except OSError:
        listener.close()
        raise
    return listener
