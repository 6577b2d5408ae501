"""How an engine lays its runners out over the cores: how many runners, and how many torch
threads each uses inside one operator."""

from __future__ import annotations

import os

from poolserve.config import EngineConfig
from poolserve.models.spec import ModelSpec


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def has_express_runner(config: EngineConfig, model: ModelSpec) -> bool:
    """Whether the engine runs an express runner beside its runners (scheduler.py's
    `next_express_batch`): on CPU, unless `--no-express-runner`. A backend sizes what may run at
    once by it (`concurrent_forwards`).

    Not for a static model: its batches end within a few milliseconds, so a request that
    arrives beside background work has no long batch to be run past, and the runners would
    only run at the lower OS priority the express runner asks of them. Measured on 2 cores
    (`benchmarks.tree_ab`, a potion-shaped model, without an express runner against with one,
    three runs of 4-5 rounds): c=64 one-sentence requests +2 %, +7 %, +2 %; c=8 × 32 sentences
    +9 %, 0 %, -1 %."""
    return model.device == "cpu" and config.express_runner and model.layout.static is None


def concurrent_forwards(config: EngineConfig, model: ModelSpec) -> int:
    """How many forward passes may run at once: one per runner, and the express runner's."""
    runners, _ = runner_layout(config, model.device)
    return runners + has_express_runner(config, model)


def runner_layout(config: EngineConfig, device: str) -> tuple[int, int | None]:
    """(runners, torch threads per runner; None: torch's default).

    On CPU, by default: one runner per core, compiled or eager. Measured on 2 cores with real
    prose and length buckets (docs/benchmarks.md): compiled ahead of time, two runners on one
    thread each served 1.30-1.51x the c=64 requests of one runner on two threads, at about
    half the p99; eager, two runners beat one on two threads by 1.3-1.4x. A large batch that
    finds the other runners idle still runs on every core (it borrows them)."""
    if device != "cpu":
        return config.runners or 1, config.torch_threads
    cores = config.cores or available_cores()
    runners = config.runners or cores
    threads = config.torch_threads or max(1, cores // runners)
    return runners, threads
