"""The Python API: `Engine(model).embed(texts)`, the same task processors the HTTP server uses."""

from __future__ import annotations

import itertools
import warnings
import weakref
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, TypeVar

import numpy as np

from poolserve.config import EngineConfig, ModelConfig
from poolserve.engine.core import BackendFactory, EngineCore, torch_backend
from poolserve.engine.tokenizer import Side, TextTokenizer, TokenizedText
from poolserve.engine.work import RequestGroup
from poolserve.errors import InputTooLongError, InvalidRequestError
from poolserve.models.kinds import Head, describe
from poolserve.service import ModelService
from poolserve.tasks.base import PoolingParams, ServeContext, run_async, run_sync, submit
from poolserve.tasks.classify import ClassifyRequest, ClassifyTask
from poolserve.tasks.embed import EmbedRequest, EmbedTask
from poolserve.tasks.pooling import PoolingRequest, PoolingTask
from poolserve.tasks.score import ScoreRequest, ScoreTask, pair_up, ranked

T = TypeVar("T")


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
        model_config = ModelConfig.of(model, model_config)
        engine_config = engine_config or EngineConfig()
        service = ModelService.load(model_config, engine_config, backend=backend)
        self._adopt(service, model_config, engine_config)
        # Dropped without close() (a notebook cell run again), the engine still lets its
        # threads and weights go once it is garbage-collected, and says so.
        self._finalizer: weakref.finalize[Any, Engine] | None = weakref.finalize(
            self, _release_unclosed, self.core, self.name
        )
        self._finalizer.atexit = False  # at exit the threads end anyway: nothing to say

    @classmethod
    def over(
        cls, service: ModelService, model_config: ModelConfig, engine_config: EngineConfig
    ) -> Engine:
        """The Python API over a model that its owner (a `ModelSet`) loaded and closes; this
        engine's `close` leaves it running."""
        engine = cls.__new__(cls)
        engine._adopt(service, model_config, engine_config)
        engine._finalizer = None
        return engine

    def _adopt(
        self, service: ModelService, model_config: ModelConfig, engine_config: EngineConfig
    ) -> None:
        self.service = service
        self.model_config = model_config
        self.engine_config = engine_config
        self.core = service.core
        self.tasks = service.tasks
        self.name = service.name
        self.kind = service.kind
        self.max_model_len = service.max_model_len
        self.embedding_dim = service.embedding_dim
        self.normalizes = service.normalizes
        self.num_special_tokens = service.num_special_tokens
        self._pooling = PythonPooling(
            max_model_len=self.max_model_len, classifier=self.tasks.pooling.classifier
        )

    @property
    def prompts(self) -> dict[str, str]:
        """The model's prompts by name (config_sentence_transformers.json, and `prompts` given
        in its ModelConfig)."""
        return dict(self.tasks.prompts.known)

    @property
    def default_prompt_name(self) -> str | None:
        """The prompt `embed` applies when none is named."""
        return self.tasks.prompts.default_name

    @property
    def embed_task(self) -> EmbedTask:
        if self.tasks.embed is None:
            raise self._cannot("embed")
        return self.tasks.embed

    # Each method has an async twin (`aembed`, ...) for a running event loop: the work runs on
    # the engine's threads and the loop only awaits it. Both build the same request.

    def embed(
        self,
        texts: str | Sequence[str],
        *,
        normalize: bool | None = None,
        dimensions: int | None = None,
        truncate_prompt_tokens: int | None = None,
        prompt_name: str | None = None,
        prompt: str | None = None,
    ) -> np.ndarray:
        """Embed texts; returns a float32 array of shape (len(texts), dim).

        `normalize` None follows the model's configuration; `dimensions` keeps the first N
        (Matryoshka) before normalizing; `truncate_prompt_tokens` cuts each input to N tokens
        (special tokens kept), -1 to the model's maximum. `prompt_name` names one of the
        model's prompts (`prompts` lists them), `prompt` gives one; with neither, the model's
        default prompt (if it has one) goes before each text, as sentence-transformers does.
        """
        return run_sync(
            self.core,
            *self._embed(texts, normalize, dimensions, truncate_prompt_tokens, prompt_name, prompt),
        )

    async def aembed(
        self,
        texts: str | Sequence[str],
        *,
        normalize: bool | None = None,
        dimensions: int | None = None,
        truncate_prompt_tokens: int | None = None,
        prompt_name: str | None = None,
        prompt: str | None = None,
    ) -> np.ndarray:
        """`embed`, awaited."""
        request = self._embed(
            texts, normalize, dimensions, truncate_prompt_tokens, prompt_name, prompt
        )
        return await run_async(self.core, *request)

    def embed_later(
        self,
        texts: str | Sequence[str],
        *,
        normalize: bool | None = None,
        dimensions: int | None = None,
        truncate_prompt_tokens: int | None = None,
        prompt_name: str | None = None,
        prompt: str | None = None,
    ) -> Future[np.ndarray]:
        """Queue `embed` and return at once: a future of its array. Cancelling the future
        drops the inputs that have not reached the model."""
        request = self._embed(
            texts, normalize, dimensions, truncate_prompt_tokens, prompt_name, prompt
        )
        return _cancellable(*submit(self.core, *request))

    def embed_counted_later(
        self,
        texts: Sequence[str],
        *,
        normalize: bool | None = None,
        dimensions: int | None = None,
        truncate_prompt_tokens: int | None = None,
        prompt_name: str | None = None,
        prompt: str | None = None,
        skip_too_long: bool = False,
    ) -> Future[CountedEmbeddings]:
        """`embed_later`, with each text's token count (special tokens included, after any
        truncation) next to its vectors. With `skip_too_long`, a text too long for the model
        (without truncation) is left out and named in `too_long` instead of failing the call:
        the others are embedded once (a bulk job's bad rows)."""
        _, ctx = self._embed(
            texts, normalize, dimensions, truncate_prompt_tokens, prompt_name, prompt
        )
        task = CountedEmbed(self.embed_task, skip_too_long=skip_too_long)
        return _cancellable(*submit(self.core, task, ctx))

    def embed_iter(
        self,
        texts: Iterable[str],
        *,
        batch_size: int = 256,
        normalize: bool | None = None,
        dimensions: int | None = None,
        truncate_prompt_tokens: int | None = None,
        prompt_name: str | None = None,
        prompt: str | None = None,
    ) -> Iterator[np.ndarray]:
        """Embed an iterable of any length, a batch at a time: yields one float32 array of up
        to `batch_size` rows per batch, in order (concatenated, they are `embed(texts)`).

        The texts are read lazily and a few batches are in flight at once, so tokenizing the
        next batches overlaps the model's work on this one, and memory holds only those.
        Stopping early (break, close) cancels what is in flight.
        """
        if batch_size < 1:
            raise InvalidRequestError(f"batch_size must be at least 1, got {batch_size}")
        in_flight: deque[Future[np.ndarray]] = deque()
        remaining = iter(texts)
        try:
            while batch := list(itertools.islice(remaining, batch_size)):
                in_flight.append(
                    self.embed_later(
                        batch,
                        normalize=normalize,
                        dimensions=dimensions,
                        truncate_prompt_tokens=truncate_prompt_tokens,
                        prompt_name=prompt_name,
                        prompt=prompt,
                    )
                )
                if len(in_flight) > BATCHES_IN_FLIGHT:
                    yield in_flight.popleft().result()
            while in_flight:
                yield in_flight.popleft().result()
        finally:
            for future in in_flight:
                future.cancel()

    def _embed(
        self,
        texts: str | Sequence[str],
        normalize: bool | None,
        dimensions: int | None,
        truncate_prompt_tokens: int | None,
        prompt_name: str | None = None,
        prompt: str | None = None,
    ) -> tuple[EmbedTask, ServeContext[EmbedRequest]]:
        params = self.pooling_params(
            normalize=normalize,
            dimensions=dimensions,
            truncate_prompt_tokens=truncate_prompt_tokens,
        )
        prompt = self.tasks.prompts.resolve(prompt_name, prompt)
        request = EmbedRequest(_texts(texts, "texts"), prompt)
        return self.embed_task, ServeContext(request, self.name, params)

    def classify(
        self,
        texts: str | Sequence[str],
        *,
        use_activation: bool = True,
        truncate_prompt_tokens: int | None = None,
    ) -> np.ndarray:
        """Class probabilities (raw logits with `use_activation=False`), shape (n, classes)."""
        return run_sync(self.core, *self._classify(texts, use_activation, truncate_prompt_tokens))

    async def aclassify(
        self,
        texts: str | Sequence[str],
        *,
        use_activation: bool = True,
        truncate_prompt_tokens: int | None = None,
    ) -> np.ndarray:
        """`classify`, awaited."""
        request = self._classify(texts, use_activation, truncate_prompt_tokens)
        return await run_async(self.core, *request)

    def _classify(
        self, texts: str | Sequence[str], use_activation: bool, truncate_prompt_tokens: int | None
    ) -> tuple[ClassifyTask, ServeContext[ClassifyRequest]]:
        task = self.tasks.classify
        if task is None:
            raise self._cannot("classify")
        params = self.pooling_params(
            use_activation=use_activation, truncate_prompt_tokens=truncate_prompt_tokens
        )
        return task, ServeContext(ClassifyRequest(_texts(texts, "texts")), self.name, params)

    def score(
        self,
        queries: str | Sequence[str],
        documents: str | Sequence[Document],
        *,
        use_activation: bool = True,
        truncate_prompt_tokens: int | None = None,
        max_tokens_per_doc: int | None = None,
        scorer: str | None = None,
    ) -> np.ndarray:
        """Scores of query-document pairs (1:1, 1:N or N:N), as `/score` computes them.

        A document is a string or a mapping with a `text` key (as the rerank APIs send them).
        `scorer` chooses among BGE-M3's ways (dense, sparse, colbert, m3); other models score
        one way.
        """
        request = self._score(
            queries, documents, use_activation, truncate_prompt_tokens, max_tokens_per_doc, scorer
        )
        return run_sync(self.core, *request)

    async def ascore(
        self,
        queries: str | Sequence[str],
        documents: str | Sequence[Document],
        *,
        use_activation: bool = True,
        truncate_prompt_tokens: int | None = None,
        max_tokens_per_doc: int | None = None,
        scorer: str | None = None,
    ) -> np.ndarray:
        """`score`, awaited."""
        request = self._score(
            queries, documents, use_activation, truncate_prompt_tokens, max_tokens_per_doc, scorer
        )
        return await run_async(self.core, *request)

    def _score(
        self,
        queries: str | Sequence[str],
        documents: str | Sequence[Document],
        use_activation: bool,
        truncate_prompt_tokens: int | None,
        max_tokens_per_doc: int | None,
        scorer: str | None,
    ) -> tuple[ScoreTask, ServeContext[ScoreRequest]]:
        task = self.tasks.score
        if task is None:
            raise self._cannot("score")
        query_list, document_list = _texts(queries, "queries"), _texts(documents, "documents")
        request = ScoreRequest(
            queries=query_list,
            documents=document_list,
            pairs=pair_up(len(query_list), len(document_list)),
            max_tokens_per_doc=max_tokens_per_doc,
            scorer=scorer,
        )
        params = self.pooling_params(
            use_activation=use_activation, truncate_prompt_tokens=truncate_prompt_tokens
        )
        return task, ServeContext(request, self.name, params)

    def rerank(
        self,
        query: str,
        documents: Sequence[Document],
        *,
        top_n: int | None = None,
        scorer: str | None = None,
    ) -> list[tuple[int, float]]:
        """(document index, score) pairs, best first; the first `top_n` (None: all).

        A document is a string or a mapping with a `text` key."""
        _check_rerank(query, top_n)
        return ranked(self.score(query, documents, scorer=scorer), top_n)

    async def arerank(
        self,
        query: str,
        documents: Sequence[Document],
        *,
        top_n: int | None = None,
        scorer: str | None = None,
    ) -> list[tuple[int, float]]:
        """`rerank`, awaited."""
        _check_rerank(query, top_n)
        return ranked(await self.ascore(query, documents, scorer=scorer), top_n)

    def embed_sparse(
        self, texts: str | Sequence[str], *, truncate_prompt_tokens: int | None = None
    ) -> list[dict[int, float]]:
        """A sparse (SPLADE) model's vocabulary weights of each text: {token id: weight}, the
        non-zero ones (`tokenize`'s ids; the tokenizer's vocabulary names them)."""
        request = self._pool(texts, "sparse", None, True, truncate_prompt_tokens, "embed_sparse")
        return run_sync(self.core, *request)

    async def aembed_sparse(
        self, texts: str | Sequence[str], *, truncate_prompt_tokens: int | None = None
    ) -> list[dict[int, float]]:
        """`embed_sparse`, awaited."""
        request = self._pool(texts, "sparse", None, True, truncate_prompt_tokens, "embed_sparse")
        return await run_async(self.core, *request)

    def pool(
        self,
        texts: str | Sequence[str],
        *,
        task: Head | None = None,
        normalize: bool | None = None,
        use_activation: bool = True,
        truncate_prompt_tokens: int | None = None,
    ) -> list[Any]:
        """The raw output of one of the model's heads for each text, as `/pooling` returns it:
        a vector (`embed`, `classify`), a matrix of one row per token (`token_embed`,
        `token_classify`), or {token id: weight} (`sparse`). `task` None: the model's main head.
        """
        request = self._pool(texts, task, normalize, use_activation, truncate_prompt_tokens, "pool")
        return run_sync(self.core, *request)

    async def apool(
        self,
        texts: str | Sequence[str],
        *,
        task: Head | None = None,
        normalize: bool | None = None,
        use_activation: bool = True,
        truncate_prompt_tokens: int | None = None,
    ) -> list[Any]:
        """`pool`, awaited."""
        request = self._pool(texts, task, normalize, use_activation, truncate_prompt_tokens, "pool")
        return await run_async(self.core, *request)

    def _pool(
        self,
        texts: str | Sequence[str],
        head: Head | None,
        normalize: bool | None,
        use_activation: bool,
        truncate_prompt_tokens: int | None,
        method: str,
    ) -> tuple[PythonPooling, ServeContext[PoolingRequest]]:
        heads = self.tasks.heads
        chosen = head or heads[0]
        if chosen not in heads:
            if method == "embed_sparse":
                raise self._cannot("embed_sparse")
            raise InvalidRequestError(
                f"{self.name} is {describe(self.kind)}; task must be one of its heads: "
                f"{', '.join(heads)} (got {head!r})"
            )
        params = self.pooling_params(
            normalize=normalize,
            use_activation=use_activation,
            truncate_prompt_tokens=truncate_prompt_tokens,
        )
        request = PoolingRequest(_texts(texts, "texts"), chosen)
        return self._pooling, ServeContext(request, self.name, params)

    def tokenize(
        self, texts: str | Sequence[str], *, add_special_tokens: bool = True
    ) -> list[int] | list[list[int]]:
        """Token ids as the model sees them: a list for one text, a list of lists for several
        (no length limit applied: `max_model_len` says what the model takes)."""
        inputs = [texts] if isinstance(texts, str) else _texts(texts, "texts")
        ids = self.core.cpu.submit(self._encode, inputs, add_special_tokens).result()
        return ids[0] if isinstance(texts, str) else ids

    async def atokenize(
        self, texts: str | Sequence[str], *, add_special_tokens: bool = True
    ) -> list[int] | list[list[int]]:
        """`tokenize`, awaited."""
        inputs = [texts] if isinstance(texts, str) else _texts(texts, "texts")
        ids = await self.core.cpu.run(self._encode, inputs, add_special_tokens)
        return ids[0] if isinstance(texts, str) else ids

    def _encode(self, texts: list[str], add_special_tokens: bool) -> list[list[int]]:
        tokenizer = self.core.tokenizer()  # the pool thread's own
        return tokenizer.encode_batch(
            texts, truncate_to=None, add_special_tokens=add_special_tokens
        )

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
        return self.service.pooling_params(
            normalize=normalize,
            dimensions=dimensions,
            truncate_prompt_tokens=truncate_prompt_tokens,
            truncation_side=truncation_side,
            use_activation=use_activation,
        )

    def _cannot(self, what: str) -> InvalidRequestError:
        methods = [
            name
            for name, serves in (
                ("embed", self.tasks.embed is not None),
                ("embed_iter", self.tasks.embed is not None),
                ("classify", self.tasks.classify is not None),
                ("score", self.tasks.score is not None),
                ("rerank", self.tasks.score is not None),
                ("embed_sparse", self.tasks.sparse),
                ("pool", True),
                ("tokenize", True),
            )
            if serves
        ]
        return InvalidRequestError(
            f"{self.name} is {describe(self.kind)}; it cannot {what} (its methods: "
            f"{', '.join(methods)}, and their async twins)"
        )

    @property
    def alive(self) -> bool:
        return self.core.alive

    def close(self, timeout: float | None = None) -> bool:
        """Finish admitted work and stop the engine's threads; with a `timeout`, False if a
        runner was still busy when it passed (it is abandoned). An engine of a `ModelSet`
        leaves its model running: closing the set closes it."""
        if self._finalizer is None:
            return True
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


# Batches `embed_iter` keeps queued beyond the one it waits for: enough that tokenizing the next
# ones overlaps the model, few enough that memory holds only them.
BATCHES_IN_FLIGHT = 3


class PythonPooling(PoolingTask):
    """The pooling task with Python results: sparse weights as {token id: weight}."""

    def postprocess(
        self, ctx: ServeContext[PoolingRequest], outputs: list[np.ndarray]
    ) -> list[Any]:
        results = super().postprocess(ctx, outputs)
        if ctx.request.head != "sparse":
            return results
        return [{entry["index"]: entry["value"] for entry in entries} for entries in results]


@dataclass(frozen=True)
class CountedEmbeddings:
    """`Engine.embed_counted_later`'s result: the vectors and token counts of the texts
    embedded, in order, and the texts left out as too long (by index in the call's texts,
    with why: "has more than 256 tokens ...")."""

    vectors: np.ndarray
    tokens: list[int]
    too_long: dict[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _TooLong:
    """An input left out as too long (in `ServeContext.item_data`)."""

    detail: str


class CountedEmbed:
    """The embed task whose result also carries each input's token count; with
    `skip_too_long`, an input too long for the model is left out (a two-token placeholder
    runs in its place) instead of failing the request."""

    def __init__(self, embed: EmbedTask, *, skip_too_long: bool = False) -> None:
        self._embed = embed
        self._skip_too_long = skip_too_long

    def inputs(self, ctx: ServeContext[EmbedRequest]) -> Sequence[Any]:
        return self._embed.inputs(ctx)

    def preprocess(
        self,
        ctx: ServeContext[EmbedRequest],
        tokenizer: TextTokenizer,
        start: int,
        inputs: Sequence[str] | Sequence[list[int]],
    ) -> list[TokenizedText]:
        try:
            return self._embed.preprocess(ctx, tokenizer, start, inputs)
        except InputTooLongError:
            if not self._skip_too_long:
                raise
        # This chunk holds a text too long: one at a time, to find which.
        items: list[TokenizedText] = []
        for offset in range(len(inputs)):
            try:
                items += self._embed.preprocess(ctx, tokenizer, start + offset, inputs[offset:][:1])
            except InputTooLongError as exc:
                ctx.item_data[start + offset] = _TooLong(exc.detail)
                special = tokenizer.encode_batch([""], truncate_to=None)[0]
                items.append(TokenizedText(special, None, self._embed.head_for(ctx)))
        return items

    def postprocess(
        self, ctx: ServeContext[EmbedRequest], outputs: list[np.ndarray]
    ) -> CountedEmbeddings:
        vectors = self._embed.postprocess(ctx, outputs)
        too_long = {i: d.detail for i, d in ctx.item_data.items() if isinstance(d, _TooLong)}
        if not too_long:
            return CountedEmbeddings(vectors, list(ctx.input_tokens))
        kept = [i for i in range(len(outputs)) if i not in too_long]
        tokens = [ctx.input_tokens[i] for i in kept]
        return CountedEmbeddings(np.ascontiguousarray(vectors[kept]), tokens, too_long)


def _cancellable(future: Future[T], group: RequestGroup) -> Future[T]:
    """`future`, whose cancel() also drops the request's inputs not yet run."""
    future.add_done_callback(lambda done: group.cancel() if done.cancelled() else None)
    return future


def _check_rerank(query: str, top_n: int | None) -> None:
    if not isinstance(query, str):
        raise TypeError(f"query must be a str, got {type(query).__name__}")
    if top_n is not None and top_n < 0:
        raise InvalidRequestError(f"top_n must be 0 or more (0 or None: all), got {top_n}")


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
