"""Each method of the Python API written once, as the builder of its request: it checks the
method's arguments and returns what the method runs (`Prepared`: the task, its context, and what
turns the task's result into the method's). Every method takes `priority`, the request's lane
(config/priorities.py: an integer from -10, first, to 10, last; above 0 is background work; its
lanes: engine/lanes.py), as every HTTP route does. `Engine` makes each method's call styles
(blocking, awaited, a future) from its builder (call_styles.py), so an option is declared once
and the three cannot drift. The pooling options go to the one resolver
(tasks/pooling_options.py)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

import numpy as np

from poolserve.config import LongInput
from poolserve.config.model_config import Kind
from poolserve.config.priorities import DEFAULT_PRIORITY, LANES, PRIORITY_RANGE
from poolserve.engine.context import PoolingOptions, PoolingParams, ServeContext
from poolserve.engine.engine_core import EngineCore
from poolserve.errors import InvalidRequestError
from poolserve.inputs.images.policy import MediaPolicy
from poolserve.inputs.images.sources import ImageInput
from poolserve.models.kinds import Head, describe
from poolserve.offline.arguments import Document, check_rerank, texts_of
from poolserve.offline.call_styles import Prepared
from poolserve.service.model_service import ModelService
from poolserve.tasks.chunking import Chunking
from poolserve.tasks.classify import ClassifyRequest
from poolserve.tasks.embed import ChunkedEmbeddings, EmbedRequest, EmbedTask
from poolserve.tasks.pooling import PoolingRequest, PoolingTask
from poolserve.tasks.score import RERANK_NAMES, SCORE_NAMES, ScoreRequest, pair_up, ranked
from poolserve.tasks.task_set import TaskSet

T = TypeVar("T")


class EngineView(Protocol):
    """What a builder reads of the engine whose method it builds (an `offline.Engine`)."""

    @property
    def service(self) -> ModelService: ...

    @property
    def core(self) -> EngineCore: ...

    @property
    def tasks(self) -> TaskSet: ...

    @property
    def name(self) -> str: ...

    @property
    def kind(self) -> Kind: ...

    @property
    def embed_task(self) -> EmbedTask: ...

    @property
    def pooling_task(self) -> PoolingTask: ...


def embed(
    engine: EngineView,
    texts: str | Sequence[str],
    *,
    normalize: bool | None = None,
    dimensions: int | None = None,
    truncate_prompt_tokens: int | None = None,
    prompt_name: str | None = None,
    prompt: str | None = None,
    long_input: LongInput | None = None,
    chunking: Chunking | None = None,
    priority: int = DEFAULT_PRIORITY,
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
    chunking: `Chunking("late", ...)`, see docs/long-inputs.md). `priority`: the request's
    lane, -10 (first) to 10 (last), 0 by default; above 0 is background work, run in time
    slices after higher lanes (every method takes it).
    """
    ctx = _embed_context(
        engine,
        texts,
        PoolingOptions(normalize, dimensions, truncate_prompt_tokens),
        engine.tasks.prompts.resolve(prompt_name, prompt),
        long_input,
        chunking,
        priority,
    )
    return Prepared(engine.embed_task, ctx)


def embed_chunks(
    engine: EngineView,
    texts: str | Sequence[str],
    *,
    normalize: bool | None = None,
    dimensions: int | None = None,
    prompt_name: str | None = None,
    prompt: str | None = None,
    chunking: Chunking | None = None,
    priority: int = DEFAULT_PRIORITY,
) -> Prepared[ChunkedEmbeddings]:
    """`embed` in chunks (`long_input="chunk"`), answering each text's chunks too:
    `.vectors` as `embed` returns them, and for each text `.chunks[i]`: its chunks' vectors
    ([chunks, dim]) and spans (each `.tokens` and `.chars`, [start, end)). With
    `Chunking("late", size=... or spans=...)`, the spans are embedded by late chunking."""
    task = engine.tasks.embed_chunks
    if task is None:
        raise cannot(engine, "embed")
    ctx = _embed_context(
        engine,
        texts,
        PoolingOptions(normalize, dimensions),
        engine.tasks.prompts.resolve(prompt_name, prompt),
        "chunk",
        chunking,
        priority,
    )
    return Prepared(task, ctx)


def embed_images(
    engine: EngineView,
    images: Any,
    *,
    normalize: bool | None = None,
    dimensions: int | None = None,
    priority: int = DEFAULT_PRIORITY,
) -> Prepared[np.ndarray]:
    """Embed images of an image-text model (CLIP, SigLIP): paths, bytes of image files, or
    PIL images (one, or a sequence); a float32 array (len(images), dim) in the space of
    `embed`'s text vectors. Options as `embed`'s."""
    if not engine.tasks.images:
        raise InvalidRequestError(
            f"{engine.name} embeds text only; embed_images needs an image-text model (CLIP, SigLIP)"
        )
    single = isinstance(images, str | bytes | os.PathLike) or hasattr(images, "getbands")
    items = [images] if single else list(images)
    if not items:
        raise InvalidRequestError("images is empty; pass at least one image")
    params = engine.service.pooling_params(
        PoolingOptions(normalize=normalize, dimensions=dimensions)
    )
    inputs: list[str | ImageInput] = [ImageInput(each) for each in items]
    request = EmbedRequest(inputs, media=MediaPolicy.for_caller())
    return Prepared(engine.embed_task, _context(request, engine, params, priority))


def _embed_context(
    engine: EngineView,
    texts: str | Sequence[str],
    options: PoolingOptions,
    prompt: str | None,
    long_input: LongInput | None,
    chunking: Chunking | None,
    priority: int,
) -> ServeContext[EmbedRequest]:
    params = engine.service.pooling_params(options)
    request = EmbedRequest(
        texts_of(texts, "texts"),
        prompt,
        long_input or engine.service.long_input,
        chunking or Chunking(),
    )
    return _context(request, engine, params, priority)


def _context(
    request: T, engine: EngineView, params: PoolingParams, priority: int
) -> ServeContext[T]:
    """The context of a request of `engine` in lane `priority` (a ValueError names a bad one)."""
    if isinstance(priority, bool) or not isinstance(priority, int) or priority not in LANES:
        raise InvalidRequestError(f"priority must be {PRIORITY_RANGE}; got {priority!r}")
    return ServeContext(request, engine.name, params, priority=priority)


def classify(
    engine: EngineView,
    texts: str | Sequence[str],
    *,
    use_activation: bool = True,
    truncate_prompt_tokens: int | None = None,
    priority: int = DEFAULT_PRIORITY,
) -> Prepared[np.ndarray]:
    """Class probabilities (raw logits with `use_activation=False`), shape (n, classes)."""
    task = engine.tasks.classify
    if task is None:
        raise cannot(engine, "classify")
    params = engine.service.pooling_params(
        PoolingOptions(use_activation=use_activation, truncate_prompt_tokens=truncate_prompt_tokens)
    )
    ctx = _context(ClassifyRequest(texts_of(texts, "texts")), engine, params, priority)
    return Prepared(task, ctx)


def score(
    engine: EngineView,
    queries: str | Sequence[str],
    documents: str | Sequence[Document],
    *,
    use_activation: bool = True,
    truncate_prompt_tokens: int | None = None,
    max_tokens_per_doc: int | None = None,
    scorer: str | None = None,
    priority: int = DEFAULT_PRIORITY,
) -> Prepared[np.ndarray]:
    """Scores of query-document pairs (1:1, 1:N or N:N), as `/score` computes them.

    A document is a string or a mapping with a `text` key (as the rerank APIs send them).
    `scorer` chooses among BGE-M3's ways (dense, sparse, colbert, m3); other models score
    one way.
    """
    return _scored(
        engine,
        queries,
        documents,
        use_activation=use_activation,
        truncate_prompt_tokens=truncate_prompt_tokens,
        max_tokens_per_doc=max_tokens_per_doc,
        scorer=scorer,
        priority=priority,
    )


def _scored(
    engine: EngineView,
    queries: str | Sequence[str],
    documents: str | Sequence[Document],
    *,
    use_activation: bool = True,
    truncate_prompt_tokens: int | None = None,
    max_tokens_per_doc: int | None = None,
    scorer: str | None = None,
    fit_documents: bool = False,
    priority: int = DEFAULT_PRIORITY,
) -> Prepared[np.ndarray]:
    task = engine.tasks.score
    if task is None:
        raise cannot(engine, "score")
    query_list, document_list = texts_of(queries, "queries"), texts_of(documents, "documents")
    request = ScoreRequest(
        queries=query_list,
        documents=document_list,
        pairs=pair_up(len(query_list), len(document_list)),
        names=RERANK_NAMES if fit_documents else SCORE_NAMES,
        max_tokens_per_doc=max_tokens_per_doc,
        fit_documents=fit_documents,
        scorer=scorer,
    )
    params = engine.service.pooling_params(
        PoolingOptions(use_activation=use_activation, truncate_prompt_tokens=truncate_prompt_tokens)
    )
    return Prepared(task, _context(request, engine, params, priority))


def rerank(
    engine: EngineView,
    query: str,
    documents: Sequence[Document],
    *,
    top_n: int | None = None,
    scorer: str | None = None,
    priority: int = DEFAULT_PRIORITY,
) -> Prepared[list[tuple[int, float]]]:
    """(document index, score) pairs, best first; the first `top_n` (None: all).

    A document is a string or a mapping with a `text` key; one too long for the model is cut
    to the room beside the query (as the rerank APIs do)."""
    check_rerank(query, top_n)
    scores = _scored(engine, query, documents, scorer=scorer, fit_documents=True, priority=priority)
    return Prepared(scores.task, scores.ctx, lambda result: ranked(result, top_n))


def embed_sparse(
    engine: EngineView,
    texts: str | Sequence[str],
    *,
    truncate_prompt_tokens: int | None = None,
    priority: int = DEFAULT_PRIORITY,
) -> Prepared[list[dict[int, float]]]:
    """A sparse (SPLADE) model's vocabulary weights of each text: {token id: weight}, the
    non-zero ones (`tokenize`'s ids; the tokenizer's vocabulary names them)."""
    if not engine.tasks.sparse:
        raise cannot(engine, "embed_sparse")
    return pool(
        engine,
        texts,
        task="sparse",
        truncate_prompt_tokens=truncate_prompt_tokens,
        priority=priority,
    )


def pool(
    engine: EngineView,
    texts: str | Sequence[str],
    *,
    task: Head | None = None,
    normalize: bool | None = None,
    use_activation: bool = True,
    truncate_prompt_tokens: int | None = None,
    priority: int = DEFAULT_PRIORITY,
) -> Prepared[list[Any]]:
    """The raw output of one of the model's heads for each text, as `/pooling` returns it:
    a vector (`embed`, `classify`), a matrix of one row per token (`token_embed`,
    `token_classify`), or {token id: weight} (`sparse`). `task` None: the model's main head.
    """
    heads = engine.tasks.heads
    chosen = task or heads[0]
    if chosen not in heads:
        raise InvalidRequestError(
            f"{engine.name} is {describe(engine.kind)}; task must be one of its heads: "
            f"{', '.join(heads)} (got {task!r})"
        )
    params = engine.service.pooling_params(
        PoolingOptions(
            normalize=normalize,
            use_activation=use_activation,
            truncate_prompt_tokens=truncate_prompt_tokens,
        )
    )
    request = PoolingRequest(texts_of(texts, "texts"), chosen)
    return Prepared(engine.pooling_task, _context(request, engine, params, priority))


def cannot(engine: EngineView, what: str) -> InvalidRequestError:
    methods = [
        name
        for name, serves in (
            ("embed", engine.tasks.embed is not None),
            ("embed_iter", engine.tasks.embed is not None),
            ("classify", engine.tasks.classify is not None),
            ("score", engine.tasks.score is not None),
            ("rerank", engine.tasks.score is not None),
            ("embed_sparse", engine.tasks.sparse),
            ("pool", True),
            ("tokenize", True),
        )
        if serves
    ]
    return InvalidRequestError(
        f"{engine.name} is {describe(engine.kind)}; it cannot {what} (its methods: "
        f"{', '.join(methods)}, and their async twins)"
    )
