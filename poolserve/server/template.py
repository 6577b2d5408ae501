"""The HTTP request template: an API endpoint declared as data, and the one handler that serves
every declared endpoint.

An API family's module (`server/apis/`) declares its endpoints: the path, the body's schema,
the documented answer and error shape, how the body names its inputs, and `translate`, which
turns a parsed body, for the model chosen to serve it, into what the request template runs
(`Served`: the task, its internal request and options, the encoder of the family's answer).
`handle` runs the same steps for every endpoint: errors in the family's shape, parse the body
(in the CPU pool), pick the model, check the input count, translate, fetch image URLs, then
`serve_task`: run the task on the model's engine (engine/pipeline.py) within the request's time
limit, cancelled if the client goes, answered with the body and the timing headers. `serves`
says which models serve an endpoint (by their tasks); `server/routes.py` makes the routes, and
`/docs` documents them, from the declarations alone.

Several families may declare one path (`/rerank`: text-embeddings-inference's body has
`texts`, Jina's, Cohere's and vLLM's `documents`): each such shape but one says which bodies
are its own (`matches`, given the decoded JSON and the model the path serves by default), the
one without is the rest's. The path is one route; the body picks its shape, and its errors take
that shape's family's form.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from fastapi import Request
from pydantic import BaseModel
from starlette.responses import Response

from poolserve.engine.context import Encoder, PoolingParams, ServeContext, Task
from poolserve.engine.lanes import header_priority, request_priority
from poolserve.engine.pipeline import serve
from poolserve.errors import (
    ConflictError,
    EngineUnavailableError,
    InvalidRequestError,
    RequestTimeoutError,
)
from poolserve.inputs.images.fetch import fetch_urls
from poolserve.inputs.images.sources import ImageInput
from poolserve.server.admission.door import ticket_of
from poolserve.server.body import parse_body, parse_chosen_body
from poolserve.server.error_responses import ErrorShape, answer_errors_as, name_inputs
from poolserve.server.observe.metrics import REQUEST_ID_KEY
from poolserve.server.responses import accepts_gzip, gzip_body, json_response
from poolserve.server.schemas import ErrorBody
from poolserve.server.serving_state import ServingState, state_of
from poolserve.service.model_service import ModelService
from poolserve.tasks.quantize import embedding_type
from poolserve.tasks.task_set import TaskSet

WireT = TypeVar("WireT", bound=BaseModel)
RequestT = TypeVar("RequestT")
ResultT = TypeVar("ResultT")

# OpenAI's error shape: every endpoint's unless its family declares its own.
OPENAI_ERRORS = ErrorShape(ErrorBody)


@dataclass(frozen=True)
class Vectors:
    """The vectors a request answers: of which output (`embed`, `token_embed`, `sparse`), in
    which types, as the request names them (float32, base64, int8, ubinary, ...), in order."""

    head: str = "embed"
    types: tuple[str, ...] = ("float",)


@dataclass(frozen=True)
class Served:
    """What one request runs: `internal` through `task` with `params`, answered by `encode`,
    within `timeout` seconds (the body's own limit, if it asks for one)."""

    task: Task[Any, Any]
    internal: Any
    params: PoolingParams
    encode: Encoder[Any, Any]
    timeout: float | None = None
    # Its image inputs, each with its name ("input 2"), whose URLs are fetched before it runs.
    images: Sequence[tuple[str, ImageInput]] = ()
    # What vectors it answers (None: none): their spaces' fingerprints go in the response.
    vectors: Vectors | None = None


@dataclass(frozen=True)
class Call(Generic[WireT]):
    """A parsed body and the model chosen to serve it."""

    wire: WireT
    service: ModelService
    state: ServingState


@dataclass(frozen=True)
class Inputs(Generic[WireT]):
    """How a body names its inputs: the field (`texts`: errors say `texts[2]`, the count limit
    names it), how many it holds, and the field that cuts a long one (named in "too long"
    errors; None: vLLM's `truncate_prompt_tokens`)."""

    field: str
    count: Callable[[WireT], int]
    cut_with: str | None = None


def every_model(tasks: TaskSet) -> bool:
    """`Endpoint.serves` of a route every model serves (vLLM's `/pooling`)."""
    return True


def embedders(tasks: TaskSet) -> bool:
    return tasks.embed is not None


def token_embedders(tasks: TaskSet) -> bool:
    """Embedding models with token vectors (an image-text model's towers pool their own)."""
    return tasks.embed is not None and "token_embed" in tasks.heads


def classifiers(tasks: TaskSet) -> bool:
    return tasks.classify is not None


def scorers(tasks: TaskSet) -> bool:
    """Models that score pairs: cross-encoders, and bi-encoders by their vectors' similarity."""
    return tasks.score is not None


@dataclass(frozen=True)
class Endpoint(Generic[WireT]):
    """One POST route of an API family."""

    path: str
    body: type[WireT]
    # The documented answer: a response model, or a union of them.
    answer: Any
    translate: Callable[[Call[WireT]], Served]
    inputs: Inputs[WireT]
    # The route's name in the OpenAPI document (its summary and operation id come from it),
    # and what it does (its description there).
    name: str
    # Which models serve it, by the tasks they have.
    serves: Callable[[TaskSet], bool] = every_model
    description: str | None = None
    errors: ErrorShape = OPENAI_ERRORS
    # The body's field that names the model (None: the first model that serves the path).
    model_field: str | None = "model"
    # Where several shapes share the path: whether a body (decoded JSON) is this shape's, for
    # the model the path serves by default. None: the shape of the bodies no other claims.
    matches: Callable[[Any, ModelService], bool] | None = None
    # Other fields whose item counts `--max-client-batch-size` bounds (vLLM's `/score`: queries
    # and documents), checked after `inputs`.
    more_inputs: tuple[Inputs[WireT], ...] = ()


def _shape_errors(request: Request, endpoint: Endpoint[Any]) -> None:
    """From here on, `request`'s errors take `endpoint`'s family's form."""
    answer_errors_as(request, endpoint.errors)
    if endpoint.inputs.cut_with is not None:
        name_inputs(request, endpoint.inputs.field, endpoint.inputs.cut_with)


async def handle(request: Request, endpoint: Endpoint[Any]) -> Response:
    """Serve `request` as `endpoint` declares."""
    _shape_errors(request, endpoint)
    state = state_of(request)
    wire = await parse_body(request, endpoint.body, state.cpu)
    return await _serve(request, state, endpoint, wire)


async def handle_shapes(request: Request, shapes: Sequence[Endpoint[Any]]) -> Response:
    """Serve `request` as the shape its body is (see the module's docstring)."""
    if len({shape.errors for shape in shapes}) == 1:  # a body that is not JSON too: their form
        answer_errors_as(request, shapes[0].errors)
    state = state_of(request)
    default = state.model_for(request.scope, None)
    picked: list[Endpoint[Any]] = []

    def choose(data: Any) -> type[BaseModel]:
        shape = next(
            (s for s in shapes if s.matches is not None and s.matches(data, default)),
            next(s for s in shapes if s.matches is None),
        )
        picked.append(shape)
        return shape.body

    wire = await parse_chosen_body(
        request, choose, state.cpu, lambda schema: _shape_errors(request, picked[-1])
    )
    return await _serve(request, state, picked[-1], wire)


async def _serve(
    request: Request, state: ServingState, endpoint: Endpoint[Any], wire: Any
) -> Response:
    model = getattr(wire, endpoint.model_field) if endpoint.model_field else None
    service = state.model_for(request.scope, model)
    for inputs in (endpoint.inputs, *endpoint.more_inputs):
        state.check_batch(inputs.count(wire), inputs.field)
    served = endpoint.translate(Call(wire, service, state))
    # Its lane and its vectors' spaces before anything is fetched (a 409 does no work).
    ctx = _context(request, service, served.internal, served.params, wire.priority, served.vectors)
    if served.images:
        await fetch_urls(state.fetcher, served.images, endpoint.inputs.field)
    return await serve_task(request, service, served.task, ctx, served.encode, served.timeout)


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


def _context(
    request: Request,
    service: ModelService,
    internal: RequestT,
    params: PoolingParams,
    priority: int | None,
    vectors: Vectors | None,
) -> ServeContext[RequestT]:
    """The request's context: in the lane its body's `priority` or its `x-priority` header
    names (engine/lanes.py; its ticket moved there), with the fingerprints of its vectors'
    spaces (for the `x-embedding-space` header and the family's body; `_spaces`)."""
    state = state_of(request)
    ticket = ticket_of(request.scope)
    lane = request_priority(priority, header_priority(request.headers.get("x-priority")))
    if ticket is not None:
        state.admission.relane(ticket, lane)
    ctx = ServeContext(
        internal,
        model_name=service.served_name,
        pooling_params=params,
        request_id=request.scope.get(REQUEST_ID_KEY) or state.new_request_id(),
        cost_meter=ticket,
        priority=lane,
    )
    if vectors is not None:
        ctx.embedding_spaces = _spaces(request, service, params, vectors)
    return ctx


def _spaces(
    request: Request, service: ModelService, params: PoolingParams, vectors: Vectors
) -> dict[str, str]:
    """The fingerprints of the request's vectors' spaces by the type it asks for; a 409 when
    the client expects others (`x-expect-embedding-space`: one fingerprint, or several as the
    response header lists them; every space the answer would carry must be among them)."""
    spaces = {
        kind: service.embedding_space(vectors.head, params, embedding_type(kind))
        for kind in vectors.types
    }
    expected = request.headers.get("x-expect-embedding-space")
    allowed = {each.strip() for each in (expected or "").split(",")}
    if expected is not None and not set(spaces.values()) <= allowed:
        raise ConflictError(
            f"this request's vectors would be in embedding space {', '.join(spaces.values())} "
            f"({service.served_name}, {params.dimensions or service.embedding_dim} dimensions, "
            f"{'normalized' if params.normalize else 'not normalized'}, "
            f"{', '.join(vectors.types)}), not {expected[:64]!r} as x-expect-embedding-space "
            "says: the model, its pooling or the request's options differ from those the "
            "expected vectors were made with; nothing was run"
        )
    return spaces


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
    ctx: ServeContext[RequestT],
    encode: Encoder[RequestT, ResultT],
    timeout: float | None = None,
) -> Response:
    """Run `ctx`'s request (`_context`) through `task` on `service`'s engine, its result written
    by `encode` (an API family's body, see `wire/`); the response carries timing headers.

    The request's time limit counts from its admission. If the client disconnects, the limit
    passes or the server's shutdown grace period ends first, the request's work is cancelled:
    its items still queued never reach the model.
    """
    state = state_of(request)
    ticket = ticket_of(request.scope)
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
        headers = timing_headers(ctx)
        if ctx.embedding_spaces:
            headers["x-embedding-space"] = ", ".join(ctx.embedding_spaces.values())
        return await _encoded_response(request, state, body, headers)
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
