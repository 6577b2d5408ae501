"""What every route handler does around the template: find the shared state, serve a task, answer
with the body and the timing headers."""

from __future__ import annotations

import asyncio
import time
from typing import Any, TypeVar

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response

from poolserve.engine.pipeline import serve
from poolserve.engine.request import Encoder, PoolingParams, ServeContext, Task
from poolserve.errors import EngineUnavailableError, InvalidRequestError, RequestTimeoutError
from poolserve.server.admission_door import ticket_of
from poolserve.server.body import parse_chosen_body
from poolserve.server.error_shapes import TEI_ERRORS, answer_errors_as
from poolserve.server.metrics import REQUEST_ID_KEY
from poolserve.server.responses import accepts_gzip, gzip_body, json_response
from poolserve.server.state import ServingState
from poolserve.service import ModelService

RequestT = TypeVar("RequestT")
ResultT = TypeVar("ResultT")


def state_of(request: Request) -> ServingState:
    state: ServingState = request.app.state.serving
    return state


TeiT = TypeVar("TeiT", bound=BaseModel)
OtherT = TypeVar("OtherT", bound=BaseModel)


async def parse_tei_or_other(
    request: Request, tei_field: str, tei: type[TeiT], other: type[OtherT]
) -> TeiT | OtherT:
    """The body of a route that serves text-embeddings-inference's shape next to another one:
    `tei` when the body has `tei_field`, else `other`. A TEI body's errors take TEI's shape."""

    def choose(data: Any) -> type[TeiT] | type[OtherT]:
        return tei if isinstance(data, dict) and tei_field in data else other

    def chosen(schema: type[TeiT] | type[OtherT]) -> None:
        if schema is tei:
            answer_errors_as(request, TEI_ERRORS)

    return await parse_chosen_body(request, choose, state_of(request).cpu, chosen)


def timing_headers(ctx: ServeContext[Any]) -> dict[str, str]:
    timings = ctx.timings
    return {
        "x-request-id": ctx.request_id,
        "x-queue-time": f"{timings.queue * 1000:.3f}",
        "x-inference-time": f"{timings.inference * 1000:.3f}",
        "x-total-time": f"{timings.total * 1000:.3f}",
    }


def _timeout(request: Request, state: ServingState, asked_in_body: float | None) -> float | None:
    """The server's request timeout, or a shorter one the client asks for (header or field)."""
    limits = [t for t in (state.request_timeout, asked_in_body) if t is not None]
    limit = min(limits) if limits else None
    asked = request.headers.get("x-request-timeout")
    if asked is not None:
        try:
            seconds = float(asked)
        except ValueError:
            raise InvalidRequestError(
                f"x-request-timeout must be a number of seconds, got {asked!r}"
            ) from None
        if not seconds > 0:
            raise InvalidRequestError("x-request-timeout must be more than 0 seconds")
        limit = seconds if limit is None else min(limit, seconds)
    return limit


async def _disconnected(request: Request) -> None:
    """Return once the client has gone (the body is read: only a disconnect can come now)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _encoded_response(
    request: Request, state: ServingState, body: bytes, headers: dict[str, str]
) -> Response:
    """The JSON response, gzipped in the CPU pool when it is large and the client accepts it."""
    if state.gzip_min_bytes:
        headers["vary"] = "accept-encoding"
        if len(body) >= state.gzip_min_bytes and accepts_gzip(
            request.headers.get("accept-encoding")
        ):
            body = await state.cpu.run(gzip_body, body)
            headers["content-encoding"] = "gzip"
    return json_response(body, headers)


async def serve_task(
    request: Request,
    service: ModelService,
    task: Task[RequestT, ResultT],
    internal: RequestT,
    params: PoolingParams,
    encode: Encoder[RequestT, ResultT],
    *,
    timeout: float | None = None,
) -> Response:
    """Run `internal` through `task` on `service`'s engine, its result written by `encode` (an
    API family's body, see `wire/`); the response carries timing headers.

    The request's time limit counts from its admission. If the client disconnects, the limit
    passes or the server's shutdown grace period ends first, the request's work is cancelled:
    its items still queued never reach the model.
    """
    state = state_of(request)
    ticket = ticket_of(request.scope)
    ctx = ServeContext(
        internal,
        model_name=service.served_name,
        pooling_params=params,
        request_id=request.scope.get(REQUEST_ID_KEY) or state.new_request_id(),
        cost_meter=ticket,
    )
    timeout = _timeout(request, state, timeout)
    wait = timeout
    if timeout is not None and ticket is not None:
        wait = max(0.0, timeout - (time.monotonic() - ticket.admitted_at))
    work = asyncio.ensure_future(serve(service.core, task, ctx, encode))
    watcher = asyncio.ensure_future(_disconnected(request))
    grace_over = state.grace.over()
    try:
        done, _ = await asyncio.wait(
            (work, watcher, grace_over), timeout=wait, return_when=asyncio.FIRST_COMPLETED
        )
    except BaseException:
        # Cancelled (uvicorn gave up waiting for this request) or worse: the work goes too, and
        # the cancellation goes on up.
        work.cancel()
        raise
    finally:
        watcher.cancel()
    if work in done:
        body = work.result()
        state.metrics.observe_stages(ctx)
        return await _encoded_response(request, state, body, timing_headers(ctx))
    work.cancel()
    if watcher in done:
        # Nobody is listening; 499 (client closed request) only shows in the access log.
        return Response(status_code=499)
    if grace_over in done:
        raise EngineUnavailableError("the server shut down before this request finished; retry it")
    raise RequestTimeoutError(
        f"the request took longer than its time limit ({timeout:g} s) and was cancelled; "
        "send less per request, or allow more time (request_timeout, x-request-timeout, "
        "--request-timeout)"
    )
