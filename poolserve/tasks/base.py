"""The request template every task shares, and the context that travels through its stages.

    validate ─► preprocess (CPU pool, chunk by chunk) ─► submit ─► await outputs
             ─► postprocess + build_response (CPU pool)

A task supplies only its differences (`Task`); `serve` (async, for HTTP) and `run_sync`
(for the offline API) are the two drivers of the same stages, so both give identical results.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import numpy as np

from poolserve.engine.core import EngineCore
from poolserve.engine.tokenizer import TextTokenizer, TokenizedText
from poolserve.engine.work import RequestGroup, WorkItem

RequestT = TypeVar("RequestT")
ResultT = TypeVar("ResultT")


@dataclass(frozen=True)
class PoolingParams:
    """How pooled outputs are post-processed; every request has one, with defaults filled in."""

    normalize: bool = True
    dimensions: int | None = None
    # Resolved: None means no truncation; -1 has already become the model's maximum.
    truncate_prompt_tokens: int | None = None


@dataclass
class Timings:
    """Wall-clock marks (perf_counter seconds) of a request's stages."""

    created: int = field(default_factory=lambda: int(time.time()))
    received: float = field(default_factory=time.perf_counter)
    tokenized: float = 0.0
    queue: float = 0.0
    inference: float = 0.0
    finished: float = 0.0

    @property
    def total(self) -> float:
        return (self.finished or time.perf_counter()) - self.received


@dataclass
class ServeContext(Generic[RequestT]):
    """One request on its way through the template."""

    request: RequestT
    model_name: str
    pooling_params: PoolingParams
    request_id: str = field(default_factory=lambda: ServeContext.new_request_id())
    timings: Timings = field(default_factory=Timings)
    prompt_tokens: int = 0

    @staticmethod
    def new_request_id() -> str:
        return uuid.uuid4().hex


class Task(Protocol[RequestT, ResultT]):
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

    def postprocess(self, ctx: ServeContext[RequestT], outputs: list[np.ndarray]) -> ResultT:
        """Turn the model's outputs into the task's result (runs in the CPU pool)."""
        ...

    def build_response(self, ctx: ServeContext[RequestT], result: ResultT) -> bytes:
        """Serialize the result as the HTTP response body (runs in the CPU pool)."""
        ...


def _tokenize_chunk(
    engine: EngineCore,
    task: Task[RequestT, Any],
    ctx: ServeContext[RequestT],
    group: RequestGroup,
    start: int,
    chunk: Sequence[Any],
) -> list[WorkItem]:
    tokenized = task.preprocess(ctx, engine.cpu.tokenizer(), start, chunk)
    return [
        WorkItem(group, start + offset, text.input_ids, text.token_type_ids)
        for offset, text in enumerate(tokenized)
    ]


def _finish(
    task: Task[RequestT, ResultT],
    ctx: ServeContext[RequestT],
    group: RequestGroup,
    outputs: list[np.ndarray],
) -> bytes:
    ctx.timings.queue = group.queue_time
    ctx.timings.inference = group.inference_time
    body = task.build_response(ctx, task.postprocess(ctx, outputs))
    ctx.timings.finished = time.perf_counter()
    return body


def _count_tokens(ctx: ServeContext[Any], items: list[WorkItem]) -> None:
    ctx.prompt_tokens += sum(item.length for item in items)


async def serve(
    engine: EngineCore, task: Task[RequestT, Any], ctx: ServeContext[RequestT]
) -> bytes:
    """Run one request through every stage without doing CPU work on the event loop.

    Large requests are tokenized one chunk at a time, each chunk submitted as soon as it is ready,
    so that a small request arriving meanwhile gets the CPU pool between two chunks.
    """
    inputs = task.inputs(ctx)
    group = engine.open_group(len(inputs))
    chunk_size = engine.config.tokenize_chunk_size
    try:
        for start in range(0, len(inputs), chunk_size):
            chunk = inputs[start : start + chunk_size]
            items = await engine.cpu.run(_tokenize_chunk, engine, task, ctx, group, start, chunk)
            _count_tokens(ctx, items)
            engine.submit(items)
        ctx.timings.tokenized = time.perf_counter()
        outputs = await asyncio.wrap_future(group.future)
    except BaseException:
        group.cancel()
        raise
    return await engine.cpu.run(_finish, task, ctx, group, outputs)


def run_sync(
    engine: EngineCore, task: Task[RequestT, ResultT], ctx: ServeContext[RequestT]
) -> ResultT:
    """The same stages for a caller thread (the offline API): every chunk is tokenized at once."""
    inputs = task.inputs(ctx)
    group = engine.open_group(len(inputs))
    chunk_size = engine.config.tokenize_chunk_size
    pending: list[Future[list[WorkItem]]] = []
    try:
        pending = [
            engine.cpu.submit(
                _tokenize_chunk, engine, task, ctx, group, start, inputs[start : start + chunk_size]
            )
            for start in range(0, len(inputs), chunk_size)
        ]
        for future in pending:
            items = future.result()
            _count_tokens(ctx, items)
            engine.submit(items)
        outputs = group.future.result()
    except BaseException:
        group.cancel()
        for future in pending:
            future.cancel()
        raise
    return task.postprocess(ctx, outputs)
