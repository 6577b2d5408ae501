"""The request template: one request driven through every stage, the same for every entrance.

    validate ─► preprocess (a runner, or the CPU pool chunk by chunk) ─► submit ─► [engine]
             ─► postprocess, encode, answer (CPU pool, started by the runner) ─► await it

`begin` (for HTTP and gRPC, with an API family's encoder and the front end's answer: HTTP's
whole response, made in the pool), `run_async`, `submit` and `run_sync`
(the Python API, results) drive the same stages of a task (engine/context.py's `Task`), so
every entrance gives identical results. Each stage after validation runs off the event loop and
hands over to the next by itself.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from functools import partial
from typing import Any, TypeVar

import numpy as np

from poolserve.engine.context import Encoder, ServeContext, Task
from poolserve.engine.engine_core import EngineCore
from poolserve.engine.work import RequestGroup, WorkItem
from poolserve.errors import EngineUnavailableError, PoolserveError

# The most characters a request's inputs may have for a runner to prepare them itself (about
# a millisecond of tokenizing; a text's length, a token-id list's ids, a conversation's turns).
RUNNER_PREPARES_CHARS = 16_384
# What a runner prepares: texts, and token-id lists or conversations (lists). A subclass of
# either (numpy's str_) goes to the pool, which takes anything.
RUNNER_KINDS = frozenset({str, list})

RequestT = TypeVar("RequestT")
ResultT = TypeVar("ResultT")
T = TypeVar("T")


def _prepare_chunk(
    engine: EngineCore,
    task: Task[RequestT, Any],
    ctx: ServeContext[RequestT],
    group: RequestGroup,
    chunk_index: int,
    inputs: Sequence[Any],
) -> None:
    """Prepare one chunk (tokenize it, for text) and submit it (a runner or the CPU pool). An
    error fails the group instead of being raised; anything worse (not an Exception) fails it
    too, and goes on up. A chunk of a request cancelled meanwhile is skipped unprepared."""
    start = chunk_index * engine.config.tokenize_chunk_size
    chunk = inputs[start : start + engine.config.tokenize_chunk_size]
    if group.finished:  # its caller went, or its time ran out, while it waited
        engine.stats.items_were_skipped(len(chunk))
        return
    started = time.perf_counter()
    try:
        payloads = task.preprocess(ctx, engine.processor(), start, chunk)
        ctx.input_tokens[start : start + len(payloads)] = [payload.cost for payload in payloads]
        items = [
            item
            for offset, payload in enumerate(payloads)
            for item in WorkItem.all_of(group, start + offset, payload)
        ]
        ctx.chunk_tokens[chunk_index] = sum(item.cost for item in items)
        ctx.chunk_started[chunk_index] = started
        ctx.chunk_seconds[chunk_index] = time.perf_counter() - started
        if ctx.cost_meter is not None:
            last = chunk_index == len(ctx.chunk_tokens) - 1
            ctx.cost_meter.tokenized(
                [item.cost for item in items],
                held_bytes=[item.payload.held_bytes for item in items],
                last=last,
            )
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
    answer: Callable[[ServeContext[RequestT], bytes], T],
    group: RequestGroup,
    outputs: list[np.ndarray],
) -> T:
    """Post-process and encode (CPU pool), recording the engine's timings first; then
    `answer` of the body, once the timings are complete."""
    timings = ctx.timings
    timings.tokenize = sum(ctx.chunk_seconds)
    timings.queue = group.queue_time
    timings.inference = group.inference_time
    ctx.batches = list(group.batches.values())
    started = time.perf_counter()
    body = encode(ctx, task.postprocess(ctx, outputs))
    timings.finished = time.perf_counter()
    timings.postprocess = timings.finished - started
    return answer(ctx, body)


def _open(
    engine: EngineCore, task: Task[RequestT, Any], ctx: ServeContext[RequestT]
) -> tuple[Sequence[Any], RequestGroup, int]:
    inputs = task.inputs(ctx)
    chunks = -(-len(inputs) // engine.config.tokenize_chunk_size)
    ctx.chunk_tokens = [0] * chunks
    ctx.chunk_seconds = [0.0] * chunks
    ctx.chunk_started = [0.0] * chunks
    ctx.input_tokens = [0] * len(inputs)
    return inputs, engine.open_group(len(inputs), ctx.priority), chunks


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


def _dropped(group: RequestGroup) -> Callable[[], None]:
    """What fails `group` if its next stage is dropped unrun (its caller would otherwise wait
    for it forever)."""

    def dropped() -> None:
        group.fail(EngineUnavailableError("the engine closed before this request ran"))

    return dropped


def _submit_for(
    engine: EngineCore, group: RequestGroup, fn: Callable[..., None], *args: Any
) -> None:
    """Queue one of `group`'s stages in the CPU pool; if closing the pool drops it before it
    runs, the group fails."""
    engine.cpu.post_at(group.priority, fn, *args, dropped=_dropped(group))


def runner_texts(engine: EngineCore, inputs: Sequence[Any]) -> list[str] | None:
    """The texts a runner primes its tokenizer with, where a runner prepares these inputs
    itself (EngineCore.prepare): one chunk of text, token ids or conversations of at most
    RUNNER_PREPARES_CHARS, on a text model. None: a larger request (or one with images) is
    prepared in the CPU pool, chunk by chunk, while the runners run batches.

    Decided in passes that run in C (`map`, `set`, `sum`): the loop runs this for every
    request, and a Python step an input is what made 32-sentence requests cost the loop 14
    calls an input (docs/benchmarks.md, a seventh session)."""
    if len(inputs) > engine.config.tokenize_chunk_size or not engine.runners_prepare:
        return None
    kinds = set(map(type, inputs))
    if not kinds <= RUNNER_KINDS:  # an image, for the pool (and its errors)
        return None
    if sum(map(len, inputs)) > RUNNER_PREPARES_CHARS:
        return None
    if kinds == {str}:
        return list(inputs)
    return [each for each in inputs if type(each) is str]


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
    finished = engine.cpu.then(group.future, partial(finish, group), group.priority)
    _queue(engine, task, ctx, group, inputs, chunks, chained, runner_texts(engine, inputs))
    return finished, group


def start_awaited(
    engine: EngineCore,
    task: Task[RequestT, Any],
    ctx: ServeContext[RequestT],
    finish: Callable[[RequestGroup, list[np.ndarray]], T],
) -> tuple[asyncio.Future[T], RequestGroup]:
    """`start` for a caller on the running event loop: the answer is a future of the loop,
    settled there once `finish` has run in the pool (`CpuPool.then_in_loop`), or on the runner
    that prepared the request (a small one, where the engine's runners answer: a static
    table's). Cancelling it cancels nothing else: cancel the group."""
    inputs, group, chunks = _open(engine, task, ctx)
    texts = runner_texts(engine, inputs)
    # A request its runner prepares, it answers too where the engine says so (runners_answer).
    here = engine.runners_answer and bool(inputs) and texts is not None
    finished = engine.cpu.then_in_loop(
        group.future, partial(finish, group), group.priority, here=here
    )
    loop = finished.get_loop()
    _queue(engine, task, ctx, group, inputs, chunks, chained=True, texts=texts, loop=loop)
    return finished, group


def _queue(
    engine: EngineCore,
    task: Task[RequestT, Any],
    ctx: ServeContext[RequestT],
    group: RequestGroup,
    inputs: Sequence[Any],
    chunks: int,
    chained: bool,
    texts: list[str] | None,
    loop: asyncio.AbstractEventLoop | None = None,
) -> None:
    """Queue the preparation of `group`'s inputs: on a runner, primed with `texts`
    (`runner_texts`; None: in the pool, see `start`); on an event loop (`loop`), a runner is
    woken once the loop's turn is done (`EngineCore.prepare`)."""
    if not inputs:  # nothing to run: the answer is built from no outputs
        group.future.set_result([])
        return
    try:
        if texts is not None:
            engine.prepare(
                group.priority,
                len(inputs),
                _prepare_chunk,
                *(engine, task, ctx, group, 0, inputs),
                dropped=_dropped(group),
                texts=texts,
                loop=loop,
            )
        elif chained:
            _submit_for(engine, group, _prepare_in_turn, engine, task, ctx, group, 0, inputs)
        else:
            for index in range(chunks):
                _submit_for(engine, group, _prepare_chunk, engine, task, ctx, group, index, inputs)
    except BaseException:
        group.cancel()
        raise


def _postprocess(
    task: Task[RequestT, ResultT],
    ctx: ServeContext[RequestT],
    group: RequestGroup,
    outputs: list[np.ndarray],
) -> ResultT:
    return task.postprocess(ctx, outputs)


async def _awaited(finished: asyncio.Future[T], group: RequestGroup) -> T:
    try:
        return await finished
    except BaseException:
        group.cancel()
        raise


def begin(
    engine: EngineCore,
    task: Task[RequestT, ResultT],
    ctx: ServeContext[RequestT],
    encode: Encoder[RequestT, ResultT],
    answer: Callable[[ServeContext[RequestT], bytes], T],
) -> tuple[asyncio.Future[T], RequestGroup]:
    """Start one request through every stage without doing CPU work on the event loop: every
    stage after validation runs off the loop and hands over to the next by itself (tokenize and
    submit on a runner or in the pool, forward on the runner, post-process and encode in the
    pool), so the loop wakes once per request. The future holds `answer(ctx, body)`, made in
    the pool once the timings are complete (a front end's whole response: the loop only sends
    it); cancel the group to drop what has not run."""
    return start_awaited(engine, task, ctx, partial(_finish, task, ctx, encode, answer))


async def run_async(
    engine: EngineCore, task: Task[RequestT, ResultT], ctx: ServeContext[RequestT]
) -> ResultT:
    """The same stages for the async Python API: the task's result, the loop never blocked."""
    return await _awaited(*start_awaited(engine, task, ctx, partial(_postprocess, task, ctx)))


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
