"""The Python API: `Engine(model).embed(texts)`, the same task processors the HTTP server uses."""

from __future__ import annotations

import itertools
import os
import warnings
import weakref
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import numpy as np

from poolserve.config import EngineConfig, LongInput, ModelConfig
from poolserve.engine.context import PoolingParams, ServeContext
from poolserve.engine.engine_core import EngineCore
from poolserve.engine.model_backend import BackendFactory
from poolserve.engine.pipeline import submit
from poolserve.errors import InvalidRequestError
from poolserve.inputs.images.policy import MediaPolicy
from poolserve.inputs.images.sources import ImageInput
from poolserve.inputs.tokenizer import Side
from poolserve.models.kinds import Head, describe
from poolserve.offline.arguments import Document, check_rerank, texts_of
from poolserve.offline.call_styles import Prepared, awaited, blocking, cancellable, later
from poolserve.offline.results import CountedEmbed, CountedEmbeddings, PythonPooling
from poolserve.service.model_service import ModelService
from poolserve.tasks.chunking import Chunking
from poolserve.tasks.classify import ClassifyRequest
from poolserve.tasks.embed import ChunkedEmbeddings, EmbedRequest, EmbedTask
from poolserve.tasks.pooling import PoolingRequest
from poolserve.tasks.score import ScoreRequest, pair_up, ranked


@dataclass(frozen=True)
class PoolingOptions:
    """The pooling options an embedding call was given (checked by `pooling_params`)."""

    normalize: bool | None = None
    dimensions: int | None = None
    truncate_prompt_tokens: int | None = None


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
        backend: BackendFactory | None = None,
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

    # Each method is written once, as the builder of its request (`_embed`, ...); `embed`,
    # `aembed` (awaited: the work runs on the engine's threads and the loop only awaits it) and
    # `embed_later` (a future) are made from it (poolserve/offline/call_styles.py).

    def _embed(
        self,
        texts: str | Sequence[str],
        *,
        normalize: bool | None = None,
        dimensions: int | None = None,
        truncate_prompt_tokens: int | None = None,
        prompt_name: str | None = None,
        prompt: str | None = None,
        long_input: LongInput | None = None,
        chunking: Chunking | None = None,
    ) -> Prepared[np.ndarray]:
        """Embed texts; returns a float32 array of shape (len(texts), dim).

        `normalize` None follows the model's configuration; `dimensions` keeps the first N
        (Matryoshka) before normalizing; `truncate_prompt_tokens` cuts each input to N tokens
        (special tokens kept), -1 to the model's maximum. `prompt_name` names one of the
        model's prompts (`prompts` lists them), `prompt` gives one; with neither, the model's
        default prompt (if it has one) goes before each text, as sentence-transformers does.
        `long_input` says what a text longer than the model's length gets ("error", "truncate",
        or "chunk": embedded in chunks, their vectors averaged by tokens; default: the model's
        `ModelConfig.long_input`); `chunking` how (`Chunking(size=, overlap=)`, or late
        chunking: `Chunking("late", ...)`, see README's Long inputs).
        """
        ctx = self._embed_context(
            texts,
            PoolingOptions(normalize, dimensions, truncate_prompt_tokens),
            self.tasks.prompts.resolve(prompt_name, prompt),
            long_input,
            chunking,
        )
        return Prepared(self.embed_task, ctx)

    def _embed_chunks(
        self,
        texts: str | Sequence[str],
        *,
        normalize: bool | None = None,
        dimensions: int | None = None,
        prompt_name: str | None = None,
        prompt: str | None = None,
        chunking: Chunking | None = None,
    ) -> Prepared[ChunkedEmbeddings]:
        """`embed` in chunks (`long_input="chunk"`), answering each text's chunks too:
        `.vectors` as `embed` returns them, and for each text `.chunks[i]`: its chunks' vectors
        ([chunks, dim]) and spans (each `.tokens` and `.chars`, [start, end)). With
        `Chunking("late", size=... or spans=...)`, the spans are embedded by late chunking."""
        task = self.tasks.embed_chunks
        if task is None:
            raise self._cannot("embed")
        ctx = self._embed_context(
            texts,
            PoolingOptions(normalize, dimensions),
            self.tasks.prompts.resolve(prompt_name, prompt),
            "chunk",
            chunking,
        )
        return Prepared(task, ctx)

    def _embed_images(
        self, images: Any, *, normalize: bool | None = None, dimensions: int | None = None
    ) -> Prepared[np.ndarray]:
        """Embed images of an image-text model (CLIP, SigLIP): paths, bytes of image files, or
        PIL images (one, or a sequence); a float32 array (len(images), dim) in the space of
        `embed`'s text vectors. Options as `embed`'s."""
        if not self.tasks.images:
            raise InvalidRequestError(
                f"{self.name} embeds text only; embed_images needs an image-text model (CLIP, "
                "SigLIP)"
            )
        single = isinstance(images, str | bytes | os.PathLike) or hasattr(images, "getbands")
        items = [images] if single else list(images)
        if not items:
            raise InvalidRequestError("images is empty; pass at least one image")
        params = self.pooling_params(normalize=normalize, dimensions=dimensions)
        inputs: list[str | ImageInput] = [ImageInput(each) for each in items]
        request = EmbedRequest(inputs, media=MediaPolicy.for_caller())
        return Prepared(self.embed_task, ServeContext(request, self.name, params))

    def _embed_context(
        self,
        texts: str | Sequence[str],
        options: PoolingOptions,
        prompt: str | None,
        long_input: LongInput | None,
        chunking: Chunking | None,
    ) -> ServeContext[EmbedRequest]:
        params = self.pooling_params(
            normalize=options.normalize,
            dimensions=options.dimensions,
            truncate_prompt_tokens=options.truncate_prompt_tokens,
        )
        request = EmbedRequest(
            texts_of(texts, "texts"),
            prompt,
            long_input or self.service.long_input,
            chunking or Chunking(),
        )
        return ServeContext(request, self.name, params)

    embed = blocking(_embed, "embed")
    aembed = awaited(_embed, "aembed", of="embed")
    embed_later = later(_embed, "embed_later", of="embed")
    embed_images = blocking(_embed_images, "embed_images")
    aembed_images = awaited(_embed_images, "aembed_images", of="embed_images")
    embed_chunks = blocking(_embed_chunks, "embed_chunks")
    aembed_chunks = awaited(_embed_chunks, "aembed_chunks", of="embed_chunks")

    def embed_counted_later(
        self,
        texts: Sequence[str],
        *,
        skip_too_long: bool = False,
        images: bool = False,
        **options: Any,
    ) -> Future[CountedEmbeddings]:
        """`embed_later` (with its options), with each text's token count (special tokens
        included, after any truncation) next to its vectors. With `skip_too_long`, a text too
        long for the model (without truncation) is left out and named in `too_long` instead of
        failing the call, and an image that cannot be read in `unreadable`: the others are
        embedded once (a bulk job's bad rows). With `images`, `texts` are image paths
        (`embed_images`; truncation does not apply)."""
        if images:
            options.pop("truncate_prompt_tokens", None)
            ctx = self._embed_images(texts, **options).ctx
        else:
            ctx = self._embed(texts, **options).ctx
        task = CountedEmbed(self.embed_task, skip_too_long=skip_too_long)
        return cancellable(*submit(self.core, task, ctx))

    def embed_iter(
        self, texts: Iterable[str], *, batch_size: int = 256, **options: Any
    ) -> Iterator[np.ndarray]:
        """Embed an iterable of any length, a batch at a time, with `embed`'s options: yields
        one float32 array of up to `batch_size` rows per batch, in order (concatenated, they
        are `embed(texts)`).

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
                in_flight.append(self.embed_later(batch, **options))
                if len(in_flight) > BATCHES_IN_FLIGHT:
                    yield in_flight.popleft().result()
            while in_flight:
                yield in_flight.popleft().result()
        finally:
            for future in in_flight:
                future.cancel()

    def _classify(
        self,
        texts: str | Sequence[str],
        *,
        use_activation: bool = True,
        truncate_prompt_tokens: int | None = None,
    ) -> Prepared[np.ndarray]:
        """Class probabilities (raw logits with `use_activation=False`), shape (n, classes)."""
        task = self.tasks.classify
        if task is None:
            raise self._cannot("classify")
        params = self.pooling_params(
            use_activation=use_activation, truncate_prompt_tokens=truncate_prompt_tokens
        )
        ctx = ServeContext(ClassifyRequest(texts_of(texts, "texts")), self.name, params)
        return Prepared(task, ctx)

    classify = blocking(_classify, "classify")
    aclassify = awaited(_classify, "aclassify", of="classify")
    classify_later = later(_classify, "classify_later", of="classify")

    def _score(
        self,
        queries: str | Sequence[str],
        documents: str | Sequence[Document],
        *,
        use_activation: bool = True,
        truncate_prompt_tokens: int | None = None,
        max_tokens_per_doc: int | None = None,
        scorer: str | None = None,
    ) -> Prepared[np.ndarray]:
        """Scores of query-document pairs (1:1, 1:N or N:N), as `/score` computes them.

        A document is a string or a mapping with a `text` key (as the rerank APIs send them).
        `scorer` chooses among BGE-M3's ways (dense, sparse, colbert, m3); other models score
        one way.
        """
        task = self.tasks.score
        if task is None:
            raise self._cannot("score")
        query_list, document_list = texts_of(queries, "queries"), texts_of(documents, "documents")
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
        return Prepared(task, ServeContext(request, self.name, params))

    score = blocking(_score, "score")
    ascore = awaited(_score, "ascore", of="score")
    score_later = later(_score, "score_later", of="score")

    def _rerank(
        self,
        query: str,
        documents: Sequence[Document],
        *,
        top_n: int | None = None,
        scorer: str | None = None,
    ) -> Prepared[list[tuple[int, float]]]:
        """(document index, score) pairs, best first; the first `top_n` (None: all).

        A document is a string or a mapping with a `text` key."""
        check_rerank(query, top_n)
        scores = self._score(query, documents, scorer=scorer)
        return Prepared(scores.task, scores.ctx, lambda result: ranked(result, top_n))

    rerank = blocking(_rerank, "rerank")
    arerank = awaited(_rerank, "arerank", of="rerank")
    rerank_later = later(_rerank, "rerank_later", of="rerank")

    def _embed_sparse(
        self, texts: str | Sequence[str], *, truncate_prompt_tokens: int | None = None
    ) -> Prepared[list[dict[int, float]]]:
        """A sparse (SPLADE) model's vocabulary weights of each text: {token id: weight}, the
        non-zero ones (`tokenize`'s ids; the tokenizer's vocabulary names them)."""
        if not self.tasks.sparse:
            raise self._cannot("embed_sparse")
        return self._pool(texts, task="sparse", truncate_prompt_tokens=truncate_prompt_tokens)

    embed_sparse = blocking(_embed_sparse, "embed_sparse")
    aembed_sparse = awaited(_embed_sparse, "aembed_sparse", of="embed_sparse")
    embed_sparse_later = later(_embed_sparse, "embed_sparse_later", of="embed_sparse")

    def _pool(
        self,
        texts: str | Sequence[str],
        *,
        task: Head | None = None,
        normalize: bool | None = None,
        use_activation: bool = True,
        truncate_prompt_tokens: int | None = None,
    ) -> Prepared[list[Any]]:
        """The raw output of one of the model's heads for each text, as `/pooling` returns it:
        a vector (`embed`, `classify`), a matrix of one row per token (`token_embed`,
        `token_classify`), or {token id: weight} (`sparse`). `task` None: the model's main head.
        """
        heads = self.tasks.heads
        chosen = task or heads[0]
        if chosen not in heads:
            raise InvalidRequestError(
                f"{self.name} is {describe(self.kind)}; task must be one of its heads: "
                f"{', '.join(heads)} (got {task!r})"
            )
        params = self.pooling_params(
            normalize=normalize,
            use_activation=use_activation,
            truncate_prompt_tokens=truncate_prompt_tokens,
        )
        request = PoolingRequest(texts_of(texts, "texts"), chosen)
        return Prepared(self._pooling, ServeContext(request, self.name, params))

    pool = blocking(_pool, "pool")
    apool = awaited(_pool, "apool", of="pool")
    pool_later = later(_pool, "pool_later", of="pool")

    def tokenize(
        self, texts: str | Sequence[str], *, add_special_tokens: bool = True
    ) -> list[int] | list[list[int]]:
        """Token ids as the model sees them: a list for one text, a list of lists for several
        (no length limit applied: `max_model_len` says what the model takes)."""
        inputs = [texts] if isinstance(texts, str) else texts_of(texts, "texts")
        ids = self.core.cpu.submit(self._encode, inputs, add_special_tokens).result()
        return ids[0] if isinstance(texts, str) else ids

    async def atokenize(
        self, texts: str | Sequence[str], *, add_special_tokens: bool = True
    ) -> list[int] | list[list[int]]:
        """`tokenize`, awaited."""
        inputs = [texts] if isinstance(texts, str) else texts_of(texts, "texts")
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


def _release_unclosed(core: EngineCore, name: str) -> None:
    warnings.warn(
        f"a poolserve.Engine ({name}) was garbage-collected without close(); its threads are "
        "stopping now. Use `with Engine(...) as engine:` or call engine.close()",
        UserWarning,
        stacklevel=2,
    )
    core.release()
