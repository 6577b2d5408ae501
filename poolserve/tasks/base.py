"""The request template every task shares, and the context that travels through its stages.

    validate ─► preprocess (CPU pool, chunk by chunk) ─► submit ─► [engine]
             ─► postprocess, then encode (CPU pool, started by the runner) ─► await bytes

A task supplies only its differences (`Task`) and stops at its result; how a result is written
on the wire belongs to each API family (`server/apis/`), passed in as `encode`. `serve` (async,
for HTTP, with an encoder), `run_async` and `run_sync` (the Python API, results) drive the same
stages, so every entrance gives identical results.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Generic, Protocol, TypeVar

import numpy as np

from poolserve.engine.core import EngineCore
from poolserve.engine.tokenizer import Side, TextTokenizer, TokenizedText
from poolserve.engine.work import RequestGroup, WorkItem
from poolserve.errors import EngineUnavailableError, PoolserveError

RequestT = TypeVar("RequestT")
ResultT = TypeVar("ResultT")
ResultT_co = TypeVar("ResultT_co", covariant=True)
T = TypeVar("T")


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
    """Told the token counts of each tokenized chunk of a request, in order, before the chunk
    reaches the engine; raises (a PoolserveError) to refuse the request. The HTTP server's
    admission ticket is one."""

    def tokenized(self, lengths: Sequence[int], *, last: bool) -> None: ...


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
    # Tokens of each input (one slot per input), filled in as chunks are tokenized.
    input_tokens: list[int] = field(default_factory=list)
    # What preprocessing learns about an input that post-processing needs, by input index.
    item_data: dict[int, Any] = field(default_factory=dict)
    # Counts what the request costs as it is tokenized (chunks must then be prepared in order).
    cost_meter: CostMeter | None = None

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
        tokenizer: TextTokenizer,
        start: int,
        inputs: Sequence[Any],
    ) -> list[TokenizedText]:
        """Tokenize and check the chunk of inputs that begins at `start` (CPU pool; thread-safe)."""
        ...

    def postprocess(self, ctx: ServeContext[RequestT], outputs: list[np.ndarray]) -> ResultT_co:
        """Turn the model's outputs into the task's result (runs in the CPU pool)."""
        ...


# An API family's response body for a task's result (runs in the CPU pool).
Encoder = Callable[[ServeContext[RequestT], ResultT], bytes]


def _prepare_chunk(
    engine: EngineCore,
    task: Task[RequestT, Any],
    ctx: ServeContext[RequestT],
    group: RequestGroup,
    chunk_index: int,
    inputs: Sequence[Any],
) -> None:
    """Tokenize one chunk and submit it (CPU pool). An error fails the group instead of being
    raised; anything worse (not an Exception) fails it too, and goes on up."""
    start = chunk_index * engine.config.tokenize_chunk_size
    chunk = inputs[start : start + engine.config.tokenize_chunk_size]
    started = time.perf_counter()
    try:
        tokenized = task.preprocess(ctx, engine.tokenizer(), start, chunk)
        items = [
            WorkItem(
                group,
                start + offset,
                text.input_ids,
                text.token_type_ids,
                text.head,
                text.attention_mask,
                text.pool_from,
            )
            for offset, text in enumerate(tokenized)
        ]
        lengths = [item.length for item in items]
        ctx.input_tokens[start : start + len(lengths)] = lengths
        ctx.chunk_tokens[chunk_index] = sum(lengths)
        ctx.chunk_seconds[chunk_index] = time.perf_counter() - started
        if ctx.cost_meter is not None:
            last = chunk_index == len(ctx.chunk_tokens) - 1
            ctx.cost_meter.tokenized(lengths, last=last)
        if not group.finished:
            engine.submit(items)
    except PoolserveError as exc:
        # The message says it all; the traceback would tie this frame (and the group, whose
        # future holds the error) into a cycle only a full garbage collection frees.
        group.fail(exc.with_traceback(None))
    except Exception as exc:
        group.fail(exc)
    except BaseException:
        group.fail(EngineUnavailableError("the server stopped while preparing this request"))
        raise


def _finish(
    task: Task[RequestT, ResultT],
    ctx: ServeContext[RequestT],
    encode: Encoder[RequestT, ResultT],
    group: RequestGroup,
    outputs: list[np.ndarray],
) -> bytes:
    """Post-process and encode (CPU pool), recording the engine's timings first."""
    timings = ctx.timings
    timings.tokenize = sum(ctx.chunk_seconds)
    timings.queue = group.queue_time
    timings.inference = group.inference_time
    started = time.perf_counter()
    body = encode(ctx, task.postprocess(ctx, outputs))
    timings.finished = time.perf_counter()
    timings.postprocess = timings.finished - started
    return body


def _open(
    engine: EngineCore, task: Task[RequestT, Any], ctx: ServeContext[RequestT]
) -> tuple[Sequence[Any], RequestGroup, int]:
    inputs = task.inputs(ctx)
    chunks = -(-len(inputs) // engine.config.tokenize_chunk_size)
    ctx.chunk_tokens = [0] * chunks
    ctx.chunk_seconds = [0.0] * chunks
    ctx.input_tokens = [0] * len(inputs)
    return inputs, engine.open_group(len(inputs)), chunks


def _prepare_in_turn(
    engine: EngineCore,
    task: Task[RequestT, Any],
    ctx: ServeContext[RequestT],
    group: RequestGroup,
    chunk_index: int,
    inputs: Sequence[Any],
) -> None:
    """Prepare one chunk, then queue the next one behind whatever the pool has to do by now
    (CPU pool)."""
    _prepare_chunk(engine, task, ctx, group, chunk_index, inputs)
    if chunk_index + 1 < len(ctx.chunk_tokens) and not group.finished:
        try:
            _submit_for(
                engine, group, _prepare_in_turn, engine, task, ctx, group, chunk_index + 1, inputs
            )
        except EngineUnavailableError as exc:
            group.fail(exc)


def _submit_for(
    engine: EngineCore, group: RequestGroup, fn: Callable[..., None], *args: Any
) -> None:
    """Queue one of `group`'s stages in the CPU pool; if closing the pool drops it before it
    runs, the group fails (its caller would otherwise wait for it forever)."""

    def dropped(stage: Future[None]) -> None:
        if stage.cancelled():
            group.fail(EngineUnavailableError("the engine closed before this request ran"))

    engine.cpu.submit(fn, *args).add_done_callback(dropped)


def start(
    engine: EngineCore,
    task: Task[RequestT, Any],
    ctx: ServeContext[RequestT],
    finish: Callable[[RequestGroup, list[np.ndarray]], T],
    *,
    chained: bool = True,
) -> tuple[Future[T], RequestGroup]:
    """Queue one request through every stage; the future holds `finish(group, outputs)`, run
    in the CPU pool. Cancel the group to drop what has not run.

    Chained, a large request is prepared one chunk at a time, each chunk queueing the next at
    the back of the pool: a small request arriving meanwhile gets the pool between two chunks,
    and the large one keeps the runner fed without a round trip through the loop. Otherwise
    (one caller with one large input list) every chunk is queued at once.
    """
    inputs, group, chunks = _open(engine, task, ctx)
    finished = engine.cpu.then(group.future, partial(finish, group))
    if not inputs:  # nothing to run: the answer is built from no outputs
        group.future.set_result([])
        return finished, group
    try:
        if chained:
            _submit_for(engine, group, _prepare_in_turn, engine, task, ctx, group, 0, inputs)
        else:
            for index in range(chunks):
                _submit_for(engine, group, _prepare_chunk, engine, task, ctx, group, index, inputs)
    except BaseException:
        group.cancel()
        raise
    return finished, group


def _postprocess(
    task: Task[RequestT, ResultT],
    ctx: ServeContext[RequestT],
    group: RequestGroup,
    outputs: list[np.ndarray],
) -> ResultT:
    return task.postprocess(ctx, outputs)


async def _awaited(finished: Future[T], group: RequestGroup) -> T:
    try:
        return await asyncio.wrap_future(finished)
    except BaseException:
        group.cancel()
        raise


async def serve(
    engine: EngineCore,
    task: Task[RequestT, ResultT],
    ctx: ServeContext[RequestT],
    encode: Encoder[RequestT, ResultT],
) -> bytes:
    """Run one request through every stage without doing CPU work on the event loop: every
    stage after validation runs off the loop and hands over to the next by itself (tokenize and
    submit in the pool, forward on the runner, post-process and encode in the pool), so the
    loop wakes once per request. Returns the response body."""
    return await _awaited(*start(engine, task, ctx, partial(_finish, task, ctx, encode)))


async def run_async(
    engine: EngineCore, task: Task[RequestT, ResultT], ctx: ServeContext[RequestT]
) -> ResultT:
    """The same stages for the async Python API: the task's result, the loop never blocked."""
    return await _awaited(*start(engine, task, ctx, partial(_postprocess, task, ctx)))


def submit(
    engine: EngineCore, task: Task[RequestT, ResultT], ctx: ServeContext[RequestT]
) -> tuple[Future[ResultT], RequestGroup]:
    """The same stages for a caller thread, every chunk queued at once; wait on the future."""
    return start(engine, task, ctx, partial(_postprocess, task, ctx), chained=False)


def run_sync(
    engine: EngineCore, task: Task[RequestT, ResultT], ctx: ServeContext[RequestT]
) -> ResultT:
    """`submit` and wait (the offline API)."""
    finished, group = submit(engine, task, ctx)
    try:
        return finished.result()
    except BaseException:
        group.cancel()
        raise
