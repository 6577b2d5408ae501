"""The HTTP request template: the one handler that serves every declared endpoint
(apis/declarations.py).

`handle` runs the same steps for every endpoint: errors in the family's shape, parse the body
(in the CPU pool), pick the model, check the input count, translate, fetch image URLs, then
run the task on the model's engine (serving/serving_step.py) within the request's time limit,
cancelled if the client goes, answered with the body and the timing headers;
`server/routes.py` makes the routes, and `/docs` documents them, from the declarations alone.
Where several shapes share a path (`Shapes`), the path is one route; the body picks its shape,
and its errors take that shape's family's form (`handle_shapes`).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from fastapi import Request
from pydantic import BaseModel
from starlette.responses import Response

from poolserve.apis.declarations import Call, Endpoint, Shapes
from poolserve.engine.context import ServeContext
from poolserve.inputs.images.fetch import fetch_urls
from poolserve.server.app_state import model_for, state_of
from poolserve.server.body import header, parse_body, parse_chosen_body
from poolserve.server.error_responses import answer_errors_as, name_inputs
from poolserve.server.middleware.admission_door import asked, ticket_of
from poolserve.server.responses import accepts_gzip, gzip_body, json_response
from poolserve.server.scope_keys import CONTEXT_KEY, REQUEST_ID_KEY
from poolserve.serving.serving_state import ServingState
from poolserve.serving.serving_step import Step, answer_metadata, context_for, run_served
from poolserve.tasks.input_steps import param_of


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
    # Run it (serving_step.py), the response made in the pool with its body and the timing
    # headers; 499 in the access log if the client went first.
    request.scope[CONTEXT_KEY] = ctx
    gzip_from = state.gzip_min_bytes
    gzips = bool(gzip_from) and accepts_gzip(header(request.scope, b"accept-encoding"))
    response = await run_served(
        step,
        service,
        served,
        ctx,
        partial(_response, gzip_from, gzips),
        partial(_disconnected, request),
    )
    return Response(status_code=499) if response is None else response


async def _disconnected(request: Request) -> None:
    """Return once the client has gone (the body is read: only a disconnect can come now)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _response(gzip_from: int, gzips: bool, ctx: ServeContext[Any], body: bytes) -> Response:
    """The JSON response with the answer's headers (CPU pool), gzipped when it is large and the
    client accepts it (`gzip_from`: the server's threshold, 0: never)."""
    headers = answer_metadata(ctx)
    if gzip_from:
        headers["vary"] = "accept-encoding"
        if gzips and len(body) >= gzip_from:
            body = gzip_body(body)
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
