"""Which routes a model serves, and the routers an app includes: every API family's declared
endpoints that its models' tasks serve (`Endpoint.serves`), each documented from its declaration,
plus the routes every server has. Route names live in the declarations alone; everything else
asks here."""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from poolserve.apis import endpoints
from poolserve.apis.declarations import Endpoint, Shapes
from poolserve.server import admin_routes
from poolserve.server.batch_api.batch_routes import ROUTES as BATCH_API_ROUTES
from poolserve.server.openapi_docs import documented
from poolserve.server.playground import playground_router
from poolserve.server.template import handle, handle_shapes
from poolserve.tasks.task_set import TaskSet

# Served whatever the models are (a body's `model`, if any, picks one; else the first).
COMMON_ROUTERS = (admin_routes.ROUTES, BATCH_API_ROUTES, playground_router)


def paths(routers: Iterable[APIRouter]) -> tuple[str, ...]:
    """The paths of `routers`' routes, in order, each once."""
    return tuple(dict.fromkeys(route.path for each in routers for route in each.routes))  # type: ignore[attr-defined]


def model_routes(tasks: TaskSet) -> tuple[str, ...]:
    """The model-specific routes a model with these tasks serves."""
    return tuple(dict.fromkeys(e.path for e in endpoints() if e.serves(tasks)))


def routers_for(models: Sequence[TaskSet]) -> list[APIRouter]:
    """The routers of an app serving models with these tasks: the common ones, and one of the
    endpoints any of them serves (the shapes of a path merged into one route)."""
    served = [e for e in endpoints() if any(e.serves(tasks) for tasks in models)]
    return [*COMMON_ROUTERS, router_of(served)]


COMMON_ROUTES = paths(COMMON_ROUTERS)


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

    shaped = Shapes(shapes)

    async def shaped_route(request: Request) -> Response:
        return await handle_shapes(request, shaped)

    return shaped_route
