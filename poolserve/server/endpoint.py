"""An API endpoint declared as data, and the one handler that serves every declared endpoint.

An API family's module (`server/apis/`) declares its endpoints: the path, the body's schema,
the documented answer and error shape, how the body names its inputs, and `translate`, which
turns a parsed body, for the model chosen to serve it, into what the request template runs
(`Served`: the task, its internal request and options, the encoder of the family's answer).
`handle` runs the same steps for every endpoint: errors in the family's shape, parse the body
(in the CPU pool), pick the model, check the input count, translate, serve. `serves` says which
models serve it (by their tasks); `router_of` makes the routes, and `/docs` documents them, from
the declarations alone (`server/apis/__init__.py` lists every family's).

Several families may declare one path (`/rerank`: text-embeddings-inference's body has
`texts`, Jina's, Cohere's and vLLM's `documents`): each such shape but one says which bodies
are its own (`matches`, given the decoded JSON and the model the path serves by default), the
one without is the rest's. The path is one route; the body picks its shape, and its errors take
that shape's family's form.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from fastapi import APIRouter, Request
from pydantic import BaseModel
from starlette.responses import Response

from poolserve.engine.request import Encoder, PoolingParams, Task
from poolserve.images.fetch import fetch_urls
from poolserve.images.sources import ImageInput
from poolserve.server.body import parse_body, parse_chosen_body
from poolserve.server.error_shapes import OPENAI_ERRORS, ErrorShape, answer_errors_as
from poolserve.server.errors import name_inputs
from poolserve.server.handlers import serve_task, state_of
from poolserve.server.schemas import documented
from poolserve.server.state import ServingState
from poolserve.service import ModelService
from poolserve.tasks.registry import TaskSet

WireT = TypeVar("WireT", bound=BaseModel)


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
    if served.images:
        await fetch_urls(state.fetcher, served.images, endpoint.inputs.field)
    return await serve_task(
        request,
        service,
        served.task,
        served.internal,
        served.params,
        served.encode,
        timeout=served.timeout,
    )


def router_of(endpoints: Sequence[Endpoint[Any]], into: APIRouter | None = None) -> APIRouter:
    """The routes of `endpoints` (added to `into`, or a new router), each documented from its
    declaration; the shapes of one path are one route (named and described by the first)."""
    by_path: dict[str, list[Endpoint[Any]]] = {}
    for endpoint in endpoints:
        by_path.setdefault(endpoint.path, []).append(endpoint)
    router = into if into is not None else APIRouter()
    for path, shapes in by_path.items():
        first = shapes[0]
        if len(shapes) == 1:
            docs = documented(first.answer, first.body, errors=first.errors.body)
        else:
            fallbacks = [shape for shape in shapes if shape.matches is None]
            assert len(fallbacks) == 1, f"{path}: exactly one shape takes the other bodies"
            docs = documented(
                functools.reduce(operator.or_, [shape.answer for shape in shapes]),
                *[shape.body for shape in shapes],
                errors=tuple(shape.errors.body for shape in shapes),
            )
        router.add_api_route(
            path,
            _route(shapes),
            methods=["POST"],
            name=first.name,
            description=first.description,
            **docs,
        )
    return router


def _route(shapes: list[Endpoint[Any]]) -> Callable[[Request], Any]:
    if len(shapes) == 1:
        (endpoint,) = shapes

        async def route(request: Request) -> Response:
            return await handle(request, endpoint)

        return route

    async def shaped_route(request: Request) -> Response:
        return await handle_shapes(request, shapes)

    return shaped_route
