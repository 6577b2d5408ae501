"""The `tei.v1` servicer: every declared RPC (rpcs.py) served through the same core as HTTP.

A call is admitted by the same admission control (its message's bytes priced as a body's), its
model chosen as HTTP chooses one for the RPC's route, its message validated and translated as
TEI's HTTP body, then run by the serving step (serving_step.py) within its time limit (the
server's, `x-request-timeout` metadata, and the call's own deadline). Messages travel as bytes:
parsing a large one and building every answer run in the CPU pool, never on the event loop.

A stream's messages are each served as one call, up to STREAM_WINDOW at a time (at most half
of --max-concurrent-requests: one stream cannot fill the door by itself), so they are batched
with everything else; answers go back in the order the messages came. The first error
ends the stream with its status, as text-embeddings-inference's streams do.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, NoReturn

import grpc
from google.protobuf.message import DecodeError, Message

from poolserve.admission.asked import Asked
from poolserve.engine.context import ServeContext
from poolserve.errors import EngineUnavailableError, InvalidRequestError, PoolserveError
from poolserve.observe.tracing import RequestMarks
from poolserve.service.model_service import ModelService
from poolserve.serving.serving_state import ServingState
from poolserve.serving.serving_step import (
    INLINE_PARSE_BYTES,
    Step,
    answer_metadata,
    body_only,
    context_for,
    run_served,
)
from poolserve.tei_grpc.rpcs import RPCS, Rpc
from poolserve.tei_grpc.status_codes import NotServedError, code_of, trailers_of

logger = logging.getLogger("poolserve")

# Messages of one stream served at once (TEI's GRPC_MAX_PARALLEL_STREAM_REQUESTS).
STREAM_WINDOW = 64
# The metadata a trace continues from.
TRACE_KEYS = ("traceparent", "tracestate")
INTERNAL_ERROR = "internal error; the server log has details"


@dataclass
class GrpcCall:
    """One served message (a unary call, or one message of a stream)."""

    rpc: Rpc
    step: Step
    started: float = field(default_factory=time.perf_counter)
    metadata: dict[str, str] = field(default_factory=dict)
    admitted: float | None = None
    ctx: ServeContext[Any] | None = None
    model: str = ""
    code: grpc.StatusCode = grpc.StatusCode.OK
    error: str | None = None


class TeiServicer:
    def __init__(self, state: ServingState) -> None:
        self.state = state
        # Calls being served (each message of a stream: one), and whether there are none.
        self._calls = 0
        self._idle = asyncio.Event()
        self._idle.set()
        # The model each RPC serves, once chosen (the models and their routes never change).
        self._chosen: dict[str, ModelService] = {}

    async def idle(self, timeout: float) -> None:
        """Return once no call is being served, or after `timeout` seconds."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), timeout)

    def served_methods(self) -> list[str]:
        """The RPCs some model here serves, by name."""
        return [rpc.method for rpc in RPCS if self._candidates(rpc)]

    def _candidates(self, rpc: Rpc) -> list[ModelService]:
        """The models that serve `rpc`: a task RPC's route's (those `rpc.only` takes), or every
        model (Tokenize)."""
        if rpc.translate is None:
            return list(self.state.models)
        return [service for service in self.state.models_serving(rpc.path) if rpc.only(service)]

    def handlers(self) -> dict[str, dict[str, grpc.RpcMethodHandler]]:
        """Every RPC's handler, by service (`tei.v1.Embed`) and method, over raw bytes."""
        services: dict[str, dict[str, grpc.RpcMethodHandler]] = {}
        for rpc in RPCS:
            if rpc.kind == "unary":
                handler = grpc.unary_unary_rpc_method_handler(partial(self._unary, rpc))
            elif rpc.kind == "stream":
                handler = grpc.stream_stream_rpc_method_handler(partial(self._stream, rpc))
            else:
                handler = grpc.stream_unary_rpc_method_handler(partial(self._collect, rpc))
            services.setdefault(f"tei.v1.{rpc.service}", {})[rpc.method] = handler
        return services

    # -- one call ----------------------------------------------------------------------------

    def _open(self, rpc: Rpc, context: grpc.aio.ServicerContext) -> GrpcCall:
        metadata = {key: value for key, value in context.invocation_metadata() or ()}
        given = metadata.get("x-request-id", "")
        request_id = given if 0 < len(given) <= 200 else self.state.new_request_id()
        remaining = context.time_remaining()
        deadline = None if remaining is None else time.monotonic() + remaining
        step = Step(self.state, None, request_id, Asked.of(metadata.get), deadline)
        self._calls += 1
        self._idle.clear()
        return GrpcCall(rpc, step, metadata=metadata)

    async def _served(
        self,
        call: GrpcCall,
        size: int | None,
        read: Callable[[GrpcCall], Awaitable[bytes | list[bytes]]],
    ) -> bytes:
        """Choose the model, admit the call (`size`: its message's bytes; None: a stream's,
        counted as they come), read its message(s) (`read`: raw bytes), and serve them; raises
        PoolserveError. A large message (or a gathered stream) is parsed, validated and
        translated in the CPU pool, as a large HTTP body is."""
        state, step, rpc = self.state, call.step, call.rpc
        if state.grace.started:  # between the signal and the gRPC server's stop
            raise EngineUnavailableError("the server is shutting down; retry the call elsewhere")
        service = self._model(rpc)
        call.model = service.served_name
        lane = step.asked.door_lane()
        ticket = await state.admission.enter(size, step.door_wait(), lane)
        step.ticket = ticket
        call.admitted = time.perf_counter()
        try:
            raw = await read(call)
            if rpc.answer is not None:
                return await state.cpu.run_at(lane, cpu_answer, rpc, raw, service)
            if size is not None and size <= INLINE_PARSE_BYTES:
                served = translated(rpc, raw, service, state)
            else:
                served = await state.cpu.run_at(lane, translated, rpc, raw, service, state)
            ctx = context_for(step, service, served.internal, served.params, None, served.vectors)
            call.ctx = ctx
            body = await run_served(step, service, served, ctx, body_only)
            assert body is not None  # no `gone`: a caller that goes cancels this task
            return body
        finally:
            state.admission.release(ticket)

    def _model(self, rpc: Rpc) -> ModelService:
        """The first model that serves the RPC's route (and that `rpc.only` takes; one that
        `rpc.prefer` takes first); none is a FAILED_PRECONDITION naming what this server
        serves."""
        chosen = self._chosen.get(rpc.full_name)
        if chosen is None:
            chosen = self._chosen[rpc.full_name] = self._choose(rpc)
        return chosen

    def _choose(self, rpc: Rpc) -> ModelService:
        candidates = self._candidates(rpc)
        if not candidates:
            raise NotServedError(
                f"{rpc.method} needs {rpc.needs}, and the models here "
                f"({', '.join(s.served_name for s in self.state.models)}) are not; "
                f"this server serves {', '.join(self.served_methods())}"
            )
        return next((service for service in candidates if rpc.prefer(service)), candidates[0])

    # -- the three kinds -----------------------------------------------------------------

    async def _unary(self, rpc: Rpc, raw: bytes, context: grpc.aio.ServicerContext) -> bytes:
        call = self._open(rpc, context)
        try:
            body = await self._served(call, len(raw), partial(_given, raw))
            answer = answer_metadata(call.ctx) if call.ctx is not None else {}
            answer["x-request-id"] = call.step.request_id
            await context.send_initial_metadata(tuple(answer.items()))
            return body
        except BaseException as error:
            await self._fail(call, context, error)
        finally:
            self._close(call)

    async def _collect(
        self, rpc: Rpc, requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext
    ) -> bytes:
        """Every message of the stream, served as one request once the stream ends."""
        call = self._open(rpc, context)

        async def read_all(call: GrpcCall) -> list[bytes]:
            messages, received = [], 0
            async for raw in requests:
                received += len(raw)
                assert call.step.ticket is not None
                call.step.ticket.body_received(received)  # 429 past the budget
                messages.append(raw)
            return messages

        try:
            body = await self._served(call, None, read_all)
            await context.send_initial_metadata((("x-request-id", call.step.request_id),))
            return body
        except BaseException as error:
            await self._fail(call, context, error)
        finally:
            self._close(call)

    async def _stream(
        self, rpc: Rpc, requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        """Each message served as its own call, `window` at a time, answered in order."""
        window_size = min(STREAM_WINDOW, max(1, self.state.admission.max_requests // 2))
        window: deque[asyncio.Future[bytes]] = deque()

        async def one(raw: bytes) -> bytes:
            call = self._open(rpc, context)
            try:
                return await self._served(call, len(raw), partial(_given, raw))
            except BaseException as error:
                _settle(call, error)
                raise
            finally:
                self._close(call)

        reading: asyncio.Future[bytes] | None = asyncio.ensure_future(anext(aiter(requests)))
        try:
            while reading is not None or window:
                waits: set[asyncio.Future[Any]] = {window[0]} if window else set()
                if reading is not None and len(window) < window_size:
                    waits.add(reading)
                done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                if reading is not None and reading in done:
                    try:
                        raw = reading.result()
                    except StopAsyncIteration:
                        reading = None
                    else:
                        window.append(asyncio.ensure_future(one(raw)))
                        reading = asyncio.ensure_future(anext(aiter(requests)))
                while window and window[0].done():
                    yield window.popleft().result()
        except PoolserveError as error:
            await context.abort(code_of(error), error.message, trailing_metadata=trailers_of(error))
        except Exception as error:
            if isinstance(error, grpc.aio.AbortError):
                raise
            logger.exception("%s failed", rpc.full_name, exc_info=error)
            await context.abort(
                grpc.StatusCode.INTERNAL, "internal error; the server log has details"
            )
        finally:
            for pending in (*window, reading):
                if pending is not None:
                    pending.cancel()
                    # Its failure, if it failed first, is settled: not logged as never read.
                    pending.add_done_callback(_retrieved)

    # -- ends ----------------------------------------------------------------------------

    async def _fail(
        self, call: GrpcCall, context: grpc.aio.ServicerContext, error: BaseException
    ) -> NoReturn:
        """Answer `error` with its status code (a bug: INTERNAL, its traceback logged)."""
        _settle(call, error)
        if isinstance(error, PoolserveError):
            await context.abort(call.code, error.message, trailing_metadata=trailers_of(error))
        elif isinstance(error, Exception) and not isinstance(error, grpc.aio.AbortError):
            logger.exception("%s failed", call.rpc.full_name, exc_info=error)
            await context.abort(call.code, INTERNAL_ERROR)
        raise error

    def _close(self, call: GrpcCall) -> None:
        """Count the call, and trace it."""
        self._calls -= 1
        if self._calls == 0:
            self._idle.set()
        ended = time.perf_counter()
        metrics = self.state.metrics
        metrics.record_grpc(call.rpc.full_name, call.code.name, call.model, ended - call.started)
        tracing = self.state.tracing
        if tracing is not None and tracing.wants(call.metadata.get("traceparent")):
            tracing.record(trace_of(call, ended))


def _settle(call: GrpcCall, error: BaseException) -> None:
    """Note how the call ended, for its count and its trace."""
    if isinstance(error, PoolserveError):
        call.code, call.error = code_of(error), error.message
    elif isinstance(error, asyncio.CancelledError):
        call.code = grpc.StatusCode.CANCELLED
    elif not isinstance(error, grpc.aio.AbortError):
        call.code, call.error = grpc.StatusCode.INTERNAL, repr(error)


async def _given(raw: bytes, call: GrpcCall) -> bytes:
    """A unary call's message: read already."""
    return raw


def _retrieved(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


def translated(
    rpc: Rpc, raw: bytes | list[bytes], service: ModelService, state: ServingState
) -> Any:
    """The message(s), parsed and translated for `service` (the request template's
    `Served`)."""
    assert rpc.translate is not None
    if isinstance(raw, list):
        return rpc.translate([parse_message(rpc, each) for each in raw], service, state)
    return rpc.translate(parse_message(rpc, raw), service, state)


def cpu_answer(rpc: Rpc, raw: bytes | list[bytes], service: ModelService) -> bytes:
    """A CPU RPC's answer (Tokenize, Decode), its message parsed here too."""
    assert rpc.answer is not None and isinstance(raw, bytes)
    return rpc.answer(parse_message(rpc, raw), service)


def parse_message(rpc: Rpc, raw: bytes) -> Message:
    try:
        return rpc.request.FromString(raw)
    except DecodeError as exc:
        raise InvalidRequestError(
            f"the message is not a tei.v1.{rpc.request.__name__}: {exc}"
        ) from None


# Status codes that mark a server span as failed (OpenTelemetry's gRPC conventions).
SERVER_FAULTS = frozenset(
    {
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DATA_LOSS,
    }
)


def trace_of(call: GrpcCall, ended: float) -> RequestMarks:
    rpc = call.rpc
    return RequestMarks(
        name=rpc.full_name.lstrip("/"),
        started=call.started,
        carrier={key: call.metadata[key] for key in TRACE_KEYS if key in call.metadata},
        attributes={
            "rpc.system": "grpc",
            "rpc.service": f"tei.v1.{rpc.service}",
            "rpc.method": rpc.method,
            "rpc.grpc.status_code": call.code.value[0],
            "poolserve.request_id": call.step.request_id,
            "poolserve.model": call.model,
        },
        admitted=call.admitted,
        ended=ended,
        ctx=call.ctx,
        error=call.error if call.code in SERVER_FAULTS else None,
    )
