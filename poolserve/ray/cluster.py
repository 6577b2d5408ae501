"""Joining or starting a Ray cluster, and what one engine actor may use of it."""

from __future__ import annotations

import logging
from dataclasses import replace

import ray

from poolserve.config import EngineConfig
from poolserve.errors import SettingError

logger = logging.getLogger(__name__)

# Ray's own log lines below this level stay out of poolserve's output.
RAY_LOG_LEVEL = logging.WARNING


def connect(address: str | None) -> bool:
    """Join the Ray cluster at `address` ("auto": the one this machine runs, or a
    `ray://host:port` / `host:port` address), or with None start a Ray instance of this machine
    alone, its node address loopback. True when this call started Ray (its caller then shuts it
    down)."""
    if ray.is_initialized():
        return False
    if address is None:
        ray.init(
            address="local",
            _node_ip_address="127.0.0.1",
            include_dashboard=False,
            logging_level=RAY_LOG_LEVEL,
            log_to_driver=True,
        )
        return True
    ray.init(address=address, logging_level=RAY_LOG_LEVEL, log_to_driver=True)
    return False


def check_fits(actors: int, cpus_each: float, *, started_here: bool) -> None:
    """Refuse (one line) `actors` of `cpus_each` CPUs that a Ray instance started here cannot
    hold: Ray would wait for them forever. A cluster joined may grow (autoscaling): not checked."""
    if not started_here:
        return
    available = ray.cluster_resources().get("CPU", 0.0)
    if actors * cpus_each > available:
        raise SettingError(
            f"--replicas {actors} of --replica-cpus {cpus_each:g} need {actors * cpus_each:g} "
            f"CPUs; this machine's Ray instance has {available:g}: lower either, or join a "
            "larger cluster with --ray-address"
        )


def actor_engine_config(config: EngineConfig, cpus: float) -> EngineConfig:
    """`config` for an engine in an actor of `cpus` CPUs: its runners and torch threads are laid
    out over those cores, not over the whole machine that other actors share."""
    if config.cores is not None:
        return config
    return replace(config, cores=max(1, int(cpus)))
