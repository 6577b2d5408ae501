"""`poolserve embed --ray`: the bulk job's parts embedded by a pool of engine actors.

The job itself (reading, parts on disk, resuming, errors) runs where the command runs, as
without Ray; only `embed_counted_later` goes to the actors, each part to the actor with the
fewest parts outstanding. So a killed job resumes the same way, and its output is the same.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import ray

from poolserve.config import EngineConfig, ModelConfig
from poolserve.config.priorities import LOWEST_PRIORITY
from poolserve.ray.cluster import actor_engine_config

if TYPE_CHECKING:
    from poolserve.tasks.counted_embed import CountedEmbeddings


class _EngineActor:
    """An engine in a Ray actor (`ray.remote` below)."""

    def __init__(self, model_config: ModelConfig, engine_config: EngineConfig) -> None:
        from poolserve.offline.model_engine import Engine

        self.engine = Engine(model_config=model_config, engine_config=engine_config)

    def describe(self) -> tuple[str, int]:
        return self.engine.name, self.engine.embedding_dim

    def embedding_space(self, options: dict[str, Any]) -> str:
        return self.engine.embedding_space(**options)

    def embed_counted(self, texts: Sequence[str], options: dict[str, Any]) -> CountedEmbeddings:
        return self.engine.embed_counted_later(texts, **options).result()


class RayEmbedder:
    """What the bulk job needs of an engine (`name`, `embedding_dim`, `embed_counted_later`),
    served by `replicas` engine actors of `replica_cpus` CPUs each."""

    def __init__(
        self,
        model_config: ModelConfig,
        engine_config: EngineConfig,
        *,
        replicas: int,
        replica_cpus: float,
    ) -> None:
        actor_class: Any = ray.remote(num_cpus=replica_cpus)(_EngineActor)
        config = actor_engine_config(engine_config, replica_cpus)
        self._actors: list[Any] = [
            actor_class.remote(model_config, config) for _ in range(replicas)
        ]
        self._outstanding = [0] * replicas
        self._lock = threading.Lock()  # settled on Ray's thread
        described = ray.get([actor.describe.remote() for actor in self._actors])
        self.name, self.embedding_dim = described[0]
        self.replicas = replicas

    def embedding_space(
        self, *, normalize: bool | None = None, dimensions: int | None = None
    ) -> str:
        """The fingerprint of the vectors' space (every actor runs the same model)."""
        options = {"normalize": normalize, "dimensions": dimensions}
        space: str = ray.get(self._actors[0].embedding_space.remote(options))
        return space

    def embed_counted_later(
        self,
        texts: Sequence[str],
        *,
        normalize: bool | None = None,
        dimensions: int | None = None,
        truncate_prompt_tokens: int | None = None,
        skip_too_long: bool = False,
        images: bool = False,
        priority: int = LOWEST_PRIORITY,
    ) -> Future[CountedEmbeddings]:
        options = {
            "normalize": normalize,
            "dimensions": dimensions,
            "truncate_prompt_tokens": truncate_prompt_tokens,
            "skip_too_long": skip_too_long,
            "images": images,
            "priority": priority,
        }
        with self._lock:
            which = min(range(len(self._actors)), key=self._outstanding.__getitem__)
            self._outstanding[which] += 1
        remote: Future[Any] = (
            self._actors[which].embed_counted.remote(list(texts), options).future()
        )
        result: Future[CountedEmbeddings] = Future()

        def settle(done: Future[Any]) -> None:
            with self._lock:
                self._outstanding[which] -= 1
            if result.done():  # cancelled by the job meanwhile
                return
            if done.cancelled():
                result.cancel()
            elif (error := done.exception()) is not None:
                result.set_exception(error)
            else:
                result.set_result(done.result())

        remote.add_done_callback(settle)
        return result

    def close(self) -> None:
        for actor in self._actors:
            ray.kill(actor)
