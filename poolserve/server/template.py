"""The HTTP request template: an API endpoint declared as data, and the one handler that serves
every declared endpoint.

An API family's module (`server/apis/`) declares its endpoints: the path, the body's schema,
the documented answer and error shape, how the body names its inputs, and `translate`, which
turns a parsed body, for the model chosen to serve it, into what the request template runs
(`Served`: the task, its internal request and options, the encoder of the family's answer).
`handle` runs the same steps for every endpoint: errors in the family's shape, parse the body
(in the CPU pool), pick the model, check the input count, translate, fetch image URLs, then
run the task on the model's engine (engine/pipeline.py) within the request's time limit,
cancelled if the client goes, answered with the body and the timing headers. `serves`
says which models serve an endpoint (by their tasks); `server/routes.py` makes the routes, and
`/docs` documents them, from the declarations alone.

Several families may declare one path (`/rerank`: text-embeddings-inference's body has
`texts`, Jina's, Cohere's and vLLM's `documents`): each such shape but one says which bodies
are its own (`matches`, given the decoded JSON and the model the path serves by default), the
one without is the rest's. The path is one route; the body picks its shape, and its errors take
that shape's family's form.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property, partial
from typing import Any, Generic, TypeVar

from fastapi import Request
from pydantic import BaseModel
from starlette.responses import Response

from poolserve.engine.context import Encoder, PoolingParams, Task
from poolserve.inputs.images.fetch import fetch_urls
from poolserve.inputs.images.sources import ImageInput
from poolserve.server.app_state import model_for, state_of
from poolserve.server.body import parse_body, parse_chosen_body
from poolserve.server.error_responses import ErrorShape, answer_errors_as, name_inputs
from poolserve.server.middleware.admission_door import asked, ticket_of
from poolserve.server.responses import accepts_gzip, gzip_body, json_response
from poolserve.server.schemas import ErrorBody
from poolserve.server.scope_keys import CONTEXT_KEY, REQUEST_ID_KEY
from poolserve.service.model_service import ModelService
from poolserve.serving.serving_state import ServingState
from poolserve.serving.serving_step import (
    Step,
    Vectors,
    answer_metadata,
    context_for,
    run_served,
)
from poolserve.tasks.input_steps import param_of
from poolserve.tasks.task_set import TaskSet

WireT = TypeVar("WireT", bound=BaseModel)
RequestT = TypeVar("RequestT")
ResultT = TypeVar("ResultT")

# OpenAI's error shape: every endpoint's unless its family declares its own.
OPENAI_ERRORS = ErrorShape(ErrorBody)


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
    # The field as a body names it, where it may be named otherwise (vLLM's `text_1` for
    # `queries`).
    field_in: Callable[[WireT], str] | None = None

    def field_of(self, wire: WireT) -> str:
        return self.field if self.field_in is None else self.field_in(wire)


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


@dataclass(frozen=True)
class Shapes:
    """The shapes of bodies one path takes (see the module's docstring)."""

    shapes: Sequence[Endpoint[Any]]

    @cached_property
    def errors(self) -> ErrorShape | None:
        """Their errors' form, where they share one (a body that is not JSON takes it)."""
        forms = {shape.errors for shape in self.shapes}
        return next(iter(forms)) if len(forms) == 1 else None

    @cached_property
    def rest(self) -> Endpoint[Any]:
        """The shape of the bodies no other claims."""
        return next(shape for shape in self.shapes if shape.matches is None)

    def of(self, data: Any, default: ModelService) -> Endpoint[Any]:
        """The shape `data` (a decoded body) is, for the model the path serves by default."""
        for shape in self.shapes:
            if shape.matches is not None and shape.matches(data, default):
                return shape
        return self.rest


async def handle_shapes(request: Request, shapes: Shapes) -> Response:
    """Serve `request` as the shape its body is (see the module's docstring)."""
    errors = shapes.errors
    if errors is not None:
        answer_errors_as(request, errors)
    state = state_of(request)
    default = model_for(state, request.scope, None)
    picked: list[Endpoint[Any]] = []

    def choose(data: Any) -> type[BaseModel]:
        shape = shapes.of(data, default)
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
    service = model_for(state, request.scope, model)
    for inputs in (endpoint.inputs, *endpoint.more_inputs):
        state.check_batch(inputs.count(wire), inputs.field_of(wire))
    served = endpoint.translate(Call(wire, service, state))
    # Its lane and its vectors' spaces before anything is fetched (a 409 does no work).
    step = step_of(request, state)
    ctx = context_for(step, service, served.internal, served.params, wire.priority, served.vectors)
    if served.images:
        await fetch_urls(state.fetcher, served.images, param_of)
    # Run it (serving_step.py) and answer with its body and the timing headers; 499 in the
    # access log if the client went first.
    request.scope[CONTEXT_KEY] = ctx
    body = await run_served(step, service, served, ctx, partial(_disconnected, request))
    if body is None:
        return Response(status_code=499)
    headers = answer_metadata(ctx)
    if state.gzip_min_bytes:
        return await _gzipped_response(request, state, body, headers)
    return json_response(body, headers)


async def _disconnected(request: Request) -> None:
    """Return once the client has gone (the body is read: only a disconnect can come now)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _gzipped_response(
    request: Request, state: ServingState, body: bytes, headers: dict[str, str]
) -> Response:
    """The JSON response, gzipped in the CPU pool when it is large and the client accepts it."""
    headers["vary"] = "accept-encoding"
    if len(body) >= state.gzip_min_bytes and accepts_gzip(request.headers.get("accept-encoding")):
        body = await state.cpu.run(gzip_body, body)
        headers["content-encoding"] = "gzip"
    return json_response(body, headers)


def step_of(request: Request, state: ServingState | None = None) -> Step:
    """The serving step of `request`: its ticket from the door, its id, its headers."""
    state = state or state_of(request)
    scope = request.scope
    return Step(
        state,
        ticket_of(scope),
        scope.get(REQUEST_ID_KEY) or state.new_request_id(),
        asked(scope),
    )
