"""The Python API: `Engine(model).embed(texts)`, the same task processors the HTTP server uses."""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from types import TracebackType

import numpy as np

from poolserve.config import EngineConfig, ModelConfig
from poolserve.engine.core import BackendFactory, EngineCore, torch_backend
from poolserve.engine.tokenizer import TextTokenizer
from poolserve.errors import InvalidRequestError
from poolserve.models.kinds import describe
from poolserve.models.loader import prepare_model
from poolserve.tasks.base import PoolingParams, ServeContext, run_sync
from poolserve.tasks.classify import ClassifyRequest
from poolserve.tasks.embed import EmbedRequest, EmbedTask
from poolserve.tasks.inputs import resolve_pooling_params
from poolserve.tasks.registry import build_tasks
from poolserve.tasks.score import ScoreRequest, pair_up


class Engine:
    """A loaded model with its batching engine running; thread-safe, close it when done.

    >>> with Engine() as engine:                      # the bundled all-MiniLM-L6-v2
    ...     vectors = engine.embed(["a sentence", "another one"])
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        model_config: ModelConfig | None = None,
        engine_config: EngineConfig | None = None,
        backend: BackendFactory = torch_backend,
    ) -> None:
        if model_config is None:
            model_config = ModelConfig(model=model)
        elif model is not None:
            if model_config.model not in (None, model):
                raise ValueError(
                    f"two models given: {model!r} and model_config.model "
                    f"{model_config.model!r}; pass one"
                )
            model_config = replace(model_config, model=model)
        self.model_config = model_config
        self.engine_config = engine_config or EngineConfig()
        loaded = prepare_model(self.model_config)
        self.core = EngineCore(loaded, self.engine_config, backend=backend)
        self.core.start()
        try:
            self.name = loaded.name
            self.max_model_len = loaded.max_model_len
            self.embedding_dim = loaded.embedding_dim
            self.normalizes = loaded.layout.normalize
            self.num_special_tokens = TextTokenizer(loaded.tokenizer_json).num_special_tokens
            self.kind = loaded.kind
            self.tasks = build_tasks(loaded)
        except BaseException:
            self.core.close()  # its threads are running: never leave them behind
            raise
        # Dropped without close() (a notebook cell run again), the engine still lets its
        # threads and weights go once it is garbage-collected, and says so.
        self._finalizer = weakref.finalize(self, _release_unclosed, self.core, self.name)
        self._finalizer.atexit = False  # at exit the threads end anyway: nothing to say

    @property
    def embed_task(self) -> EmbedTask:
        if self.tasks.embed is None:
            raise self._cannot("embed")
        return self.tasks.embed

    def embed(
        self,
        texts: str | Sequence[str],
        *,
        normalize: bool | None = None,
        dimensions: int | None = None,
        truncate_prompt_tokens: int | None = None,
    ) -> np.ndarray:
        """Embed texts; returns a float32 array of shape (len(texts), dim).

        `normalize` None follows the model's configuration; `dimensions` keeps the first N
        (Matryoshka) before normalizing; `truncate_prompt_tokens` cuts each input to N tokens
        (special tokens kept), -1 to the model's maximum.
        """
        inputs = _texts(texts, "texts")
        params = self.pooling_params(
            normalize=normalize,
            dimensions=dimensions,
            truncate_prompt_tokens=truncate_prompt_tokens,
        )
        ctx = ServeContext(EmbedRequest(inputs), model_name=self.name, pooling_params=params)
        return run_sync(self.core, self.embed_task, ctx)

    def classify(
        self,
        texts: str | Sequence[str],
        *,
        use_activation: bool = True,
        truncate_prompt_tokens: int | None = None,
    ) -> np.ndarray:
        """Class probabilities (raw logits with `use_activation=False`), shape (n, classes)."""
        task = self.tasks.classify
        if task is None:
            raise self._cannot("classify")
        params = self.pooling_params(
            use_activation=use_activation, truncate_prompt_tokens=truncate_prompt_tokens
        )
        request = ClassifyRequest(_texts(texts, "texts"))
        return run_sync(self.core, task, ServeContext(request, self.name, params))

    def score(
        self,
        queries: str | Sequence[str],
        documents: str | Sequence[Document],
        *,
        use_activation: bool = True,
        truncate_prompt_tokens: int | None = None,
        max_tokens_per_doc: int | None = None,
    ) -> np.ndarray:
        """Scores of query-document pairs (1:1, 1:N or N:N), as `/score` computes them.

        A document is a string or a mapping with a `text` key (as the rerank APIs send them).
        """
        task = self.tasks.score
        if task is None:
            raise self._cannot("score")
        query_list, document_list = _texts(queries, "queries"), _texts(documents, "documents")
        request = ScoreRequest(
            queries=query_list,
            documents=document_list,
            pairs=pair_up(len(query_list), len(document_list)),
            max_tokens_per_doc=max_tokens_per_doc,
        )
        params = self.pooling_params(
            use_activation=use_activation, truncate_prompt_tokens=truncate_prompt_tokens
        )
        return run_sync(self.core, task, ServeContext(request, self.name, params))

    def rerank(
        self, query: str, documents: Sequence[Document], *, top_n: int | None = None
    ) -> list[tuple[int, float]]:
        """(document index, score) pairs, best first; the first `top_n` (None: all).

        A document is a string or a mapping with a `text` key."""
        if not isinstance(query, str):
            raise TypeError(f"query must be a str, got {type(query).__name__}")
        if top_n is not None and top_n < 0:
            raise InvalidRequestError(f"top_n must be 0 or more (0 or None: all), got {top_n}")
        scores = self.score(query, documents)
        order = sorted(range(len(scores)), key=lambda index: -scores[index])
        return [(index, float(scores[index])) for index in order[: top_n or None]]

    def pooling_params(
        self,
        *,
        normalize: bool | None = None,
        dimensions: int | None = None,
        truncate_prompt_tokens: int | None = None,
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
            truncate_prompt_tokens=truncate_prompt_tokens,
            use_activation=use_activation,
        )

    def _cannot(self, what: str) -> InvalidRequestError:
        methods = [
            name
            for name, task in (
                ("embed", self.tasks.embed),
                ("classify", self.tasks.classify),
                ("score", self.tasks.score),
                ("rerank", self.tasks.score),
            )
            if task is not None
        ]
        return InvalidRequestError(
            f"{self.name} is {describe(self.kind)}; it cannot {what} (its methods: "
            f"{', '.join(methods) or 'none of embed, classify, score, rerank'})"
        )

    @property
    def alive(self) -> bool:
        return self.core.alive

    def close(self, timeout: float | None = None) -> bool:
        """Finish admitted work and stop the engine's threads; with a `timeout`, False if a
        runner was still busy when it passed (it is abandoned)."""
        self._finalizer.detach()
        return self.core.close(timeout)

    def __enter__(self) -> Engine:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def _release_unclosed(core: EngineCore, name: str) -> None:
    warnings.warn(
        f"a poolserve.Engine ({name}) was garbage-collected without close(); its threads are "
        "stopping now. Use `with Engine(...) as engine:` or call engine.close()",
        UserWarning,
        stacklevel=2,
    )
    core.release()


Document = str | Mapping[str, str]


def _texts(texts: str | Sequence[Document], argument: str) -> list[str]:
    """The argument as a list of strings: one string is one text; a mapping with a `text` key
    (a rerank document) is its text; anything else is a TypeError naming where it is."""
    if isinstance(texts, str):
        return [texts]
    if isinstance(texts, Mapping) or not isinstance(texts, Iterable):
        raise TypeError(f"{argument} must be a str or a list of str, got {type(texts).__name__}")
    inputs: list[str] = []
    for index, item in enumerate(texts):
        text = item.get("text") if isinstance(item, Mapping) and argument == "documents" else item
        if not isinstance(text, str):
            shape = "a str or a mapping with a 'text' str" if argument == "documents" else "a str"
            raise TypeError(f"{argument}[{index}] must be {shape}, got {type(text).__name__}")
        inputs.append(text)
    if not inputs:
        raise InvalidRequestError(f"{argument} is empty; pass at least one text")
    return inputs
