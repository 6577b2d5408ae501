"""Which routes a model serves, and the routers an app includes: every API family's declared
endpoints that its models' tasks serve (`Endpoint.serves`), plus the routes every server has.
Route names live in the declarations alone; everything else asks here."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from fastapi import APIRouter

from poolserve.server.apis import endpoints, hand_routes
from poolserve.server.endpoint import router_of
from poolserve.server.playground_routes import playground_router
from poolserve.tasks.registry import TaskSet

# Served whatever the models are (a body's `model`, if any, picks one; else the first).
COMMON_ROUTERS = (*hand_routes(), playground_router)


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
