"""`poolserve serve --ray` and `poolserve embed --ray`: the commands' Ray paths."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any

import ray
from ray import serve

from poolserve.config import EngineConfig, ModelConfig, ServerConfig
from poolserve.models.describe import prepare_model
from poolserve.ray.bulk_actors import RayEmbedder
from poolserve.ray.cluster import check_fits, connect
from poolserve.ray.replica import APP_NAME, deployment
from poolserve.serving.shutdown import exit_now

if TYPE_CHECKING:
    from poolserve.bulk.job import JobReport

logger = logging.getLogger("poolserve")


def serve_on_ray(
    model_config: ModelConfig,
    engine_config: EngineConfig,
    server_config: ServerConfig,
    *,
    replicas: int,
    replica_cpus: float,
    address: str | None,
) -> None:
    """Serve until SIGTERM/SIGINT through Ray Serve's proxy on the server's host and port;
    raises ModelLoadError (or SettingError) for what cannot start."""
    # Settings and the model's description, before Ray starts and its replicas load (they
    # download the weights where they run; the driver needs only the length limit).
    server_config.check_limits(
        prepare_model(model_config, engine_config.max_batch_tokens, weights=False).max_model_len
    )
    started = connect(address)
    # After Ray's start, which installs handlers of its own: a signal stops start-up too.
    _on_signals(_stop)
    try:
        try:
            check_fits(replicas, replica_cpus, started_here=started)
            serve.start(http_options={"host": server_config.host, "port": server_config.port})
            serve.run(
                deployment(
                    replicas=replicas,
                    replica_cpus=replica_cpus,
                    model_config=model_config,
                    engine_config=engine_config,
                    server_config=server_config,
                ),
                name=APP_NAME,
                route_prefix="/",
            )
            logger.info(
                "serving on http://%s:%d through Ray Serve, %d replica(s) of %g CPU(s)",
                server_config.host,
                server_config.port,
                replicas,
                replica_cpus,
            )
            threading.Event().wait()  # until a signal raises _Stop
        except _Stop:
            pass
        _on_signals(
            lambda signum, frame: exit_now(signum, f"{signal.Signals(signum).name} while stopping")
        )
        logger.info(
            "stopping: Ray Serve drains the replicas (up to %ds)", server_config.shutdown_timeout
        )
        if started:
            serve.shutdown()
        else:  # a cluster joined keeps running; only this application goes
            serve.delete(APP_NAME)
    finally:
        if started:
            ray.shutdown()


class _Stop(Exception):
    """SIGTERM or SIGINT: stop serving."""


def _stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop


def _on_signals(handler: Callable[[int, FrameType | None], Any]) -> None:
    for each in (signal.SIGTERM, signal.SIGINT):
        signal.signal(each, handler)


def embed_on_ray(
    model_config: ModelConfig,
    engine_config: EngineConfig,
    run: Callable[[RayEmbedder], JobReport],
    *,
    replicas: int,
    replica_cpus: float,
    address: str | None,
    resume: str = "",
) -> JobReport:
    """`run` (the bulk job) with its parts embedded by `replicas` engine actors (`resume`: the
    command that resumes the job, named where it stops for want of actors)."""
    # A bad path or setting fails before Ray starts; the actors download the weights.
    prepare_model(model_config, weights=False)
    started = connect(address)
    try:
        check_fits(replicas, replica_cpus, started_here=started)
        embedder = RayEmbedder(
            model_config,
            engine_config,
            replicas=replicas,
            replica_cpus=replica_cpus,
            resume=resume,
        )
        try:
            return run(embedder)
        finally:
            embedder.close()
    finally:
        if started:
            ray.shutdown()
