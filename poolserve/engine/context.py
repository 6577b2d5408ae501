"""What a task supplies to the request template, and the context that travels through its
stages (the template itself, which drives them, is `engine/pipeline.py`).

    validate ─► preprocess (CPU pool, chunk by chunk) ─► submit ─► [engine]
             ─► postprocess, then encode (CPU pool, started by the runner) ─► await bytes

A task supplies only its differences (`Task`) and stops at its result; how a result is written
on the wire belongs to each API family (`apis/`), passed in as `encode`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import numpy as np

from poolserve.config.priorities import DEFAULT_PRIORITY
from poolserve.engine.work import BatchMark, Parts, Payload
from poolserve.inputs.tokenizer import Side

RequestT = TypeVar("RequestT")
ResultT = TypeVar("ResultT")
ResultT_co = TypeVar("ResultT_co", covariant=True)
T = TypeVar("T")


@dataclass(frozen=True)
class PoolingOptions:
    """What a request asks of pooling, as its caller gave it (None: the model's default); one
    resolver checks it against the model and fills in its meaning (`PoolingParams`)."""

    normalize: bool | None = None
    # Keep the first N dimensions (Matryoshka).
    dimensions: int | None = None
    # Cut each input to N tokens (special tokens kept); -1: to the model's maximum.
    truncate_prompt_tokens: int | None = None
    truncation_side: Side = "right"
    # Apply the model's activation (sigmoid/softmax) to classifier and cross-encoder outputs.
    use_activation: bool = True


@dataclass(frozen=True)
class PoolingParams:
    """How pooled outputs are post-processed; every request has one, with defaults filled in."""

    normalize: bool = True
    dimensions: int | None = None
    # Resolved: None means no truncation; -1 has already become the model's maximum.
    truncate_prompt_tokens: int | None = None
    # Which end truncation cuts.
    truncation_side: Side = "right"
    # Apply the model's activation (sigmoid/softmax) to classifier and cross-encoder outputs.
    use_activation: bool = True


@dataclass
class Timings:
    """Wall-clock marks (perf_counter seconds) of a request's stages."""

    created: int = field(default_factory=lambda: int(time.time()))
    received: float = field(default_factory=time.perf_counter)
    # Seconds spent in each stage (tokenize: summed over chunks).
    tokenize: float = 0.0
    queue: float = 0.0
    inference: float = 0.0
    postprocess: float = 0.0
    finished: float = 0.0

    @property
    def total(self) -> float:
        return (self.finished or time.perf_counter()) - self.received


class CostMeter(Protocol):
    """Told what each prepared chunk of a request holds, in order, before the chunk reaches the
    engine: each item's tokens, and the bytes it holds beyond them (an image's pixels and
    output; 0 for text); raises (a PoolserveError) to refuse the request. The HTTP server's
    admission ticket is one, and prices them in its own units."""

    def tokenized(
        self, lengths: Sequence[int], *, last: bool, held_bytes: Sequence[int] = ()
    ) -> None: ...


@dataclass
class ServeContext(Generic[RequestT]):
    """One request on its way through the template."""

    request: RequestT
    model_name: str
    pooling_params: PoolingParams
    request_id: str = field(default_factory=lambda: ServeContext.new_request_id())
    timings: Timings = field(default_factory=Timings)
    # Prompt tokens and tokenizing seconds of each chunk of inputs, filled in as chunks are
    # tokenized (one slot per chunk: chunks may be prepared on several threads at once).
    chunk_tokens: list[int] = field(default_factory=list)
    chunk_seconds: list[float] = field(default_factory=list)
    # When each chunk's preparation started (perf_counter; traces).
    chunk_started: list[float] = field(default_factory=list)
    # The batches its inputs ran in (engine/work.py's BatchMark), once they all have.
    batches: list[BatchMark] = field(default_factory=list)
    # Tokens of each input (one slot per input), filled in as chunks are tokenized.
    input_tokens: list[int] = field(default_factory=list)
    # What preprocessing learns about an input that post-processing needs, by input index.
    item_data: dict[int, Any] = field(default_factory=dict)
    # Counts what the request costs as it is tokenized (chunks must then be prepared in order).
    cost_meter: CostMeter | None = None
    # Its lane (engine/lanes.py): lower runs first, in the CPU pool and on the runners.
    priority: int = DEFAULT_PRIORITY
    # The fingerprints of the spaces its vectors live in, by embedding type (float, int8, ...;
    # models/embedding_space.py); empty where it answers no vectors.
    embedding_spaces: dict[str, str] = field(default_factory=dict)

    @property
    def prompt_tokens(self) -> int:
        return sum(self.chunk_tokens)

    @staticmethod
    def new_request_id() -> str:
        return uuid.uuid4().hex


class Task(Protocol[RequestT, ResultT_co]):
    """What a task supplies to the template."""

    def inputs(self, ctx: ServeContext[RequestT]) -> Sequence[Any]:
        """The request's inputs, one work item each (cheap: no tokenization here)."""
        ...

    def preprocess(
        self,
        ctx: ServeContext[RequestT],
        processor: Any,
        start: int,
        inputs: Sequence[Any],
    ) -> Sequence[Payload | Parts]:
        """Prepare the chunk of inputs that begins at `start` for the engine, with the model's
        processor of the calling thread (a `TextTokenizer` for text): one payload each, which
        says its cost, or `Parts` for an input that runs as several (CPU pool; thread-safe)."""
        ...

    def postprocess(self, ctx: ServeContext[RequestT], outputs: list[np.ndarray]) -> ResultT_co:
        """Turn the model's outputs into the task's result (runs in the CPU pool)."""
        ...


# An API family's response body for a task's result (runs in the CPU pool).
Encoder = Callable[[ServeContext[RequestT], ResultT], bytes]
