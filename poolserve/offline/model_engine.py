"""The Python API: `Engine(model).embed(texts)`, the same task processors the HTTP server uses.

An `Engine` owns one loaded model (or, made by a `ModelSet`, uses one it owns); its methods are
built from their request builders (builders.py) in three call styles (call_styles.py)."""

from __future__ import annotations

import itertools
import warnings
import weakref
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future
from types import TracebackType
from typing import Any

import numpy as np

from poolserve.config import EngineConfig, ModelConfig
from poolserve.engine.context import PoolingOptions
from poolserve.engine.engine_core import EngineCore
from poolserve.engine.model_backend import BackendFactory
from poolserve.engine.pipeline import submit
from poolserve.errors import InvalidRequestError
from poolserve.offline import builders
from poolserve.offline.arguments import texts_of
from poolserve.offline.call_styles import awaited, blocking, cancellable, later
from poolserve.offline.python_pooling import PythonPooling
from poolserve.service.model_service import ModelService
from poolserve.tasks.counted_embed import CountedEmbed, CountedEmbeddings
from poolserve.tasks.embed import EmbedTask
from poolserve.tasks.quantize import COMPACT_TYPES


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
        # `pool` and `embed_sparse` answer with Python results (sparse weights as a dict).
        self.pooling_task = PythonPooling(
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
            raise builders.cannot(self, "embed")
        return self.tasks.embed

    # Each method is written once, as the builder of its request (builders.py); `embed`,
    # `aembed` (awaited: the work runs on the engine's threads and the loop only awaits it) and
    # `embed_later` (a future) are made from it (call_styles.py).

    embed = blocking(builders.embed, "embed")
    aembed = awaited(builders.embed, "aembed", of="embed")
    embed_later = later(builders.embed, "embed_later", of="embed")
    embed_images = blocking(builders.embed_images, "embed_images")
    aembed_images = awaited(builders.embed_images, "aembed_images", of="embed_images")
    embed_chunks = blocking(builders.embed_chunks, "embed_chunks")
    aembed_chunks = awaited(builders.embed_chunks, "aembed_chunks", of="embed_chunks")
    classify = blocking(builders.classify, "classify")
    aclassify = awaited(builders.classify, "aclassify", of="classify")
    classify_later = later(builders.classify, "classify_later", of="classify")
    score = blocking(builders.score, "score")
    ascore = awaited(builders.score, "ascore", of="score")
    score_later = later(builders.score, "score_later", of="score")
    rerank = blocking(builders.rerank, "rerank")
    arerank = awaited(builders.rerank, "arerank", of="rerank")
    rerank_later = later(builders.rerank, "rerank_later", of="rerank")
    embed_sparse = blocking(builders.embed_sparse, "embed_sparse")
    aembed_sparse = awaited(builders.embed_sparse, "aembed_sparse", of="embed_sparse")
    embed_sparse_later = later(builders.embed_sparse, "embed_sparse_later", of="embed_sparse")
    pool = blocking(builders.pool, "pool")
    apool = awaited(builders.pool, "apool", of="pool")
    pool_later = later(builders.pool, "pool_later", of="pool")

    def embedding_space(
        self,
        *,
        normalize: bool | None = None,
        dimensions: int | None = None,
        embedding_type: str = "float",
    ) -> str:
        """The fingerprint of the space `embed`'s vectors live in with these options (`embed`'s;
        `embedding_type`: float, or a compact type: int8, uint8, binary, ubinary), as the
        server's `x-embedding-space` header carries it: store it beside an index, and compare it
        before adding vectors from another engine or server (docs/apis.md)."""
        if self.tasks.embed is None:
            raise builders.cannot(self, "embed")
        if embedding_type not in ("float", *COMPACT_TYPES):
            raise InvalidRequestError(
                f"embedding_type must be float, {', '.join(COMPACT_TYPES)}; got {embedding_type!r}"
            )
        params = self.service.pooling_params(PoolingOptions(normalize, dimensions))
        return self.service.embedding_space("embed", params, embedding_type)

    def embed_counted_later(
        self,
        texts: Sequence[str],
        *,
        skip_too_long: bool = False,
        images: bool = False,
        **options: Any,
    ) -> Future[CountedEmbeddings]:
        """`embed_later` (with its options), with each text's token count (special tokens included,
        after any truncation) next to its vectors: a bulk job's task (tasks/counted_embed.py). With
        `skip_too_long`, a text too long for the model (without truncation) is left out and named in
        `too_long` instead of failing the call, and an image that cannot be read in `unreadable`:
        the others are embedded once (a bulk job's bad rows). With `images`, `texts` are image paths
        (`embed_images`; truncation does not apply)."""
        if images:
            options.pop("truncate_prompt_tokens", None)
            ctx = builders.embed_images(self, texts, **options).ctx
        else:
            ctx = builders.embed(self, texts, **options).ctx
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
