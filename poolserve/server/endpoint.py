"""An API endpoint declared as data, and the one handler that serves every declared endpoint.

An API family's module (`server/apis/`) declares its endpoints: the path, the body's schema,
the documented answer and error shape, how the body names its inputs, and `translate`, which
turns a parsed body, for the model chosen to serve it, into what the request template runs
(`Served`: the task, its internal request and options, the encoder of the family's answer).
`handle` runs the same steps for every endpoint: errors in the family's shape, parse the body
(in the CPU pool), pick the model, check the input count, translate, serve. `router_of` makes
the routes, and `/docs` documents them, from the declarations alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from fastapi import APIRouter, Request
from pydantic import BaseModel
from starlette.responses import Response

from poolserve.server.body import parse_body
from poolserve.server.errors import answer_tei_errors, name_inputs
from poolserve.server.handlers import serve_task, state_of
from poolserve.server.schemas import ErrorShape, documented
from poolserve.server.state import ServingState
from poolserve.service import ModelService
from poolserve.tasks.base import Encoder, PoolingParams, Task

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
    description: str | None = None
    errors: ErrorShape = "openai"
    # The body's field that names the model (None: the first model that serves the path).
    model_field: str | None = "model"


async def handle(request: Request, endpoint: Endpoint[Any]) -> Response:
    """Serve `request` as `endpoint` declares."""
    if endpoint.errors == "tei":
        answer_tei_errors(request)
    if endpoint.inputs.cut_with is not None:
        name_inputs(request, endpoint.inputs.field, endpoint.inputs.cut_with)
    state = state_of(request)
    wire = await parse_body(request, endpoint.body, state.cpu)
    model = getattr(wire, endpoint.model_field) if endpoint.model_field else None
    service = state.model_for(request.scope, model)
    state.check_batch(endpoint.inputs.count(wire), endpoint.inputs.field)
    served = endpoint.translate(Call(wire, service, state))
    return await serve_task(
        request,
        service,
        served.task,
        served.internal,
        served.params,
        served.encode,
        timeout=served.timeout,
    )


def router_of(endpoints: Sequence[Endpoint[Any]]) -> APIRouter:
    """The routes of `endpoints`, each documented from its declaration."""
    router = APIRouter()
    for endpoint in endpoints:
        router.add_api_route(
            endpoint.path,
            _route(endpoint),
            methods=["POST"],
            name=endpoint.name,
            description=endpoint.description,
            **documented(endpoint.answer, endpoint.body, errors=endpoint.errors),
        )
    return router


def _route(endpoint: Endpoint[Any]) -> Callable[[Request], Any]:
    async def route(request: Request) -> Response:
        return await handle(request, endpoint)

    return route
