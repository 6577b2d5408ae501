"""One loaded model as every entrance serves it: its engine core, its task processors, what it is.

The HTTP app (one or several of these behind one server) and the Python API (`Engine`) both wrap
a `ModelService`; neither reaches into the other.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from poolserve.config import EngineConfig, LongInput, ModelConfig
from poolserve.engine.context import PoolingParams
from poolserve.engine.cpu_pool import CpuPool
from poolserve.engine.engine_core import EngineCore
from poolserve.engine.model_backend import BackendFactory
from poolserve.inputs.tokenizer import Side, TextTokenizer
from poolserve.models.describe import prepare_model
from poolserve.models.kinds import Kind
from poolserve.tasks.input_steps import resolve_pooling_params
from poolserve.tasks.task_set import TaskSet, build_tasks

logger = logging.getLogger(__name__)


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
        """Load the model and start its engine (its runners, on `cpu` if shared); raises if
        anything fails, with nothing left running."""
        spec = prepare_model(model_config, engine_config.max_batch_tokens)
        if spec.capped_from is not None:
            logger.info(
                "%s: its length limit %d is more than --max-batch-tokens %d; serving inputs of "
                "up to %d tokens (raise --max-batch-tokens to serve longer ones)",
                spec.name,
                spec.capped_from,
                engine_config.max_batch_tokens,
                spec.max_model_len,
            )
        core = EngineCore(spec, engine_config, backend=backend, cpu=cpu)
        core.start()
        try:
            return cls(
                core=core,
                tasks=build_tasks(spec, max_input_tokens=model_config.max_input_tokens),
                name=spec.name,
                kind=spec.kind,
                max_model_len=spec.max_model_len,
                embedding_dim=spec.embedding_dim,
                default_dimensions=spec.layout.truncate_dim,
                normalizes=spec.layout.normalize,
                num_special_tokens=TextTokenizer(spec.tokenizer_json).num_special_tokens,
                served_names=served_names or (spec.name,),
                output_floats=spec.output_floats,
                long_input=model_config.long_input,
            )
        except BaseException:
            core.close()  # its threads are running: never leave them behind
            raise

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

    def pooling_params(
        self,
        *,
        normalize: bool | None = None,
        dimensions: int | None = None,
        truncate_prompt_tokens: int | None = None,
        truncation_side: Side = "right",
        use_activation: bool = True,
    ) -> PoolingParams:
        """A request's pooling options checked against this model."""
        return resolve_pooling_params(
            max_model_len=self.max_model_len,
            embedding_dim=self.embedding_dim,
            num_special_tokens=self.num_special_tokens,
            model_normalizes=self.normalizes,
            normalize=normalize,
            dimensions=dimensions,
            default_dimensions=self.default_dimensions,
            truncate_prompt_tokens=truncate_prompt_tokens,
            truncation_side=truncation_side,
            use_activation=use_activation,
        )
