"""An engine in a Ray actor, and what Ray raises when an actor is lost (`poolserve embed
--ray`'s pool of them: ray/bulk_actors.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import ray
from ray.exceptions import (
    ActorUnschedulableError,
    NodeDiedError,
    ObjectLostError,
    RayActorError,
    WorkerCrashedError,
)

from poolserve.config import EngineConfig, ModelConfig
from poolserve.errors import EngineUnavailableError

if TYPE_CHECKING:
    from poolserve.tasks.counted_embed import CountedEmbeddings

# What Ray raises for a call whose actor went (its node, its process), as opposed to an error
# of the call itself (a RayTaskError wrapping the engine's).
ACTOR_LOST = (
    RayActorError,
    ActorUnschedulableError,
    NodeDiedError,
    WorkerCrashedError,
    ObjectLostError,
)


class EngineActorsLostError(EngineUnavailableError):
    """No engine actor could be had for the job's calls (one line, with how to resume)."""


class EngineActor:
    """An engine in a Ray actor (made one with `ray.remote`)."""

    def __init__(self, model_config: ModelConfig, engine_config: EngineConfig) -> None:
        from poolserve.offline.model_engine import Engine

        self.engine = Engine(model_config=model_config, engine_config=engine_config)

    def describe(self) -> tuple[str, int]:
        return self.engine.name, self.engine.embedding_dim

    def embedding_space(self, options: dict[str, Any]) -> str:
        return self.engine.embedding_space(**options)

    def embed_counted(self, texts: Sequence[str], options: dict[str, Any]) -> CountedEmbeddings:
        return self.engine.embed_counted_later(texts, **options).result()

    def close(self) -> None:
        self.engine.close()


def init_failed(error: BaseException) -> bool:
    """Whether the actor died building its engine (the model cannot load there): not a loss
    that another actor would fare better with."""
    return isinstance(error, RayActorError) and error.actor_init_failed


def first_line(error: BaseException) -> str:
    """The error's type and first line, for a log line (Ray's carry its state dump)."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0][:200]}" if text else type(error).__name__


def free_cpus() -> float:
    """The CPUs the cluster has free now (0 where Ray cannot say)."""
    with contextlib.suppress(Exception):
        return float(ray.available_resources().get("CPU", 0.0))
    return 0.0
