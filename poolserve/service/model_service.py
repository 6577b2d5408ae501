"""One model as every entrance serves it: its engine core, its task processors, what it is;
prepared (described, its tasks built, every setting checked) before it is started (loaded).

The HTTP app (one or several of these behind one server) and the Python API (`Engine`) both wrap
a `ModelService`; neither reaches into the other.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, TypeVar

from poolserve.backends import backend_for
from poolserve.config import EngineConfig, LongInput, ModelConfig
from poolserve.engine.context import PoolingOptions, PoolingParams
from poolserve.engine.cpu_pool import CpuPool
from poolserve.engine.engine_core import EngineCore
from poolserve.engine.model_backend import BackendFactory
from poolserve.inputs.tokenizer import TextTokenizer
from poolserve.models.describe import prepare_model
from poolserve.models.embedding_space import SpaceOfLoaded
from poolserve.models.kinds import Kind
from poolserve.models.resolve import fetch_weights
from poolserve.tasks.pooling_options import resolve_pooling
from poolserve.tasks.task_set import TaskSet, build_tasks

logger = logging.getLogger(__name__)

T = TypeVar("T")
# The most values `ModelService.remembered` keeps.
REMEMBERED = 1024


class Memo:
    """Values made once by key and kept, at most `size` (past that, a client that varies its
    options freely, the memory starts again). An error is raised each time, never kept.
    Threads may race to make one value: each gets an equal one."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._values: dict[Hashable, Any] = {}

    def get(self, key: Hashable, make: Callable[[], T]) -> T:
        try:
            value: T = self._values[key]
        except KeyError:
            value = make()
            if len(self._values) >= self._size:
                self._values.clear()
            self._values[key] = value
        return value

    def __len__(self) -> int:
        return len(self._values)


@dataclass(frozen=True)
class ModelService:
    core: EngineCore
    tasks: TaskSet
    # The model's id (a hub id, or its directory's name).
    name: str
    kind: Kind
    max_model_len: int
    embedding_dim: int
    # The Matryoshka dimension a request gets when it names none (the model's truncate_dim).
    default_dimensions: int | None
    normalizes: bool
    num_special_tokens: int
    # The names clients may pass as `model` (responses carry the first).
    served_names: tuple[str, ...]
    # The floats of one input's output, and whether per token (the memory bound's D).
    output_floats: tuple[int, bool] = (0, False)
    # What a long embedding input gets when its request does not say (--long-input).
    long_input: LongInput = "error"
    # What it was asked to load (where its weights come from).
    source: ModelConfig = field(default_factory=ModelConfig)
    # Which space its vectors live in (models/embedding_space.py), once started.
    loaded_space: SpaceOfLoaded = field(default_factory=SpaceOfLoaded, compare=False)
    # What it makes of the options requests send (`remembered`).
    _remembered: Memo = field(default_factory=lambda: Memo(REMEMBERED), compare=False, repr=False)

    @classmethod
    def prepare(
        cls,
        model_config: ModelConfig,
        engine_config: EngineConfig,
        *,
        served_names: tuple[str, ...] | None = None,
        backend: BackendFactory | None = None,
        cpu: CpuPool | None = None,
    ) -> ModelService:
        """Everything about the model that can be known and checked before its weights load:
        its description (configs and tokenizer: a hub model's weights are not downloaded), its
        tasks, its engine with its backend placed (`backend`: None, the one
        `engine_config.backend` names). No thread starts; `start` loads it. A setting that
        cannot work raises here (SettingError, one line)."""
        spec = prepare_model(model_config, engine_config.max_batch_tokens, weights=False)
        checkpoint = spec.name
        if served_names:
            # Its log lines name it as clients do: two entries of one checkpoint stay apart.
            spec = replace(spec, name=served_names[0])
        tasks = build_tasks(spec, max_input_tokens=model_config.max_input_tokens)
        core = EngineCore(
            spec,
            engine_config,
            backend=backend or backend_for(engine_config, spec),
            cpu=cpu,
        )
        return cls(
            core=core,
            tasks=tasks,
            name=checkpoint,
            kind=spec.kind,
            max_model_len=spec.max_model_len,
            embedding_dim=spec.embedding_dim,
            default_dimensions=spec.layout.truncate_dim,
            normalizes=spec.layout.normalize,
            num_special_tokens=spec.num_special_tokens,
            served_names=served_names or (spec.name,),
            output_floats=spec.output_floats,
            long_input=model_config.long_input or spec.default_long_input,
            source=model_config,
        )

    def start(self) -> None:
        """Fetch the weights (a hub model's, pinned to the revision described) and load them
        on the runners' threads; raises if anything fails, with nothing left running."""
        spec = self.core.model
        if spec.capped_from is not None:
            logger.info(
                "%s: its length limit %d is more than --max-batch-tokens %d; serving inputs of "
                "up to %d tokens (raise --max-batch-tokens to serve longer ones)",
                spec.name,
                spec.capped_from,
                self.core.config.max_batch_tokens,
                spec.max_model_len,
            )
        try:
            fetch_weights(self.source.model, self.source.revision, spec.layout.directory)
            self.loaded_space.measure(spec.layout, spec.tokenizer_json)
        except BaseException:
            self.core.close()
            raise
        self.core.start()  # a failed start closes the core

    @classmethod
    def load(
        cls,
        model_config: ModelConfig,
        engine_config: EngineConfig,
        *,
        served_names: tuple[str, ...] | None = None,
        backend: BackendFactory | None = None,
        cpu: CpuPool | None = None,
    ) -> ModelService:
        """`prepare`, then `start`: the model loaded, its engine running."""
        service = cls.prepare(
            model_config, engine_config, served_names=served_names, backend=backend, cpu=cpu
        )
        service.start()
        return service

    def close(self, timeout: float | None = None) -> bool:
        """Stop the engine (`EngineCore.close`); a service never started just lets go."""
        return self.core.close(timeout)

    @property
    def served_name(self) -> str:
        """The name responses carry."""
        return self.served_names[0]

    @property
    def alive(self) -> bool:
        return self.core.alive

    def tokenizer(self) -> TextTokenizer:
        """The calling CPU-pool thread's tokenizer of this model."""
        return self.core.tokenizer()

    def embedding_space(
        self, head: str, params: PoolingParams, embedding_type: str = "float"
    ) -> str:
        """The fingerprint of the space of `head`'s outputs as `params` ask for them
        (models/embedding_space.py)."""
        return self.loaded_space.space.fingerprint(
            head=head,
            normalize=params.normalize,
            dimensions=params.dimensions or self.embedding_dim,
            embedding_type=embedding_type,
        )

    def pooling_params(self, options: PoolingOptions | None = None) -> PoolingParams:
        """A request's pooling options checked against this model (tasks/pooling_options.py)."""
        options = options or PoolingOptions()
        # With the values' types: the Python API passes them unchecked, and 256.0 == 256.
        key = (
            options,
            type(options.dimensions),
            type(options.truncate_prompt_tokens),
            type(options.normalize),
        )
        return self.remembered(key, partial(resolve_pooling, options, self))

    def remembered(self, key: Hashable, make: Callable[[], T]) -> T:
        """`make()`, a value that depends on nothing but this model and `key` (a request's
        options), made once and kept (`Memo`): clients send a few sets of options, each then
        one lookup a request."""
        return self._remembered.get(key, make)
