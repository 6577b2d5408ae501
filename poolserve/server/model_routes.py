"""Which routes a model serves: the routers of the tasks it has, plus the routes every server
has. Route names live in the routers alone; everything else asks here."""

from __future__ import annotations

from collections.abc import Iterable

from fastapi import APIRouter

from poolserve.server.apis.cohere import cohere_router
from poolserve.server.apis.openai import embeddings_router
from poolserve.server.apis.tei.endpoints import (
    sparse_router,
    tei_embed_router,
    tei_inference_router,
    tei_predict_router,
    tei_router,
)
from poolserve.server.apis.vllm import classify_router, pooling_router
from poolserve.server.playground_routes import playground_router
from poolserve.server.pooling_routes import score_router
from poolserve.server.routes import router
from poolserve.tasks.registry import TaskSet

# Served whatever the models are (a body's `model`, if any, picks one; else the first).
COMMON_ROUTERS = (router, tei_router, playground_router)


def task_routers(tasks: TaskSet) -> list[APIRouter]:
    """The routers of the tasks a model has."""
    return [
        *([embeddings_router, cohere_router, tei_embed_router] if tasks.embed is not None else []),
        *([classify_router, tei_predict_router] if tasks.classify is not None else []),
        # The Inference API's one route: feature extraction or text classification.
        *([tei_inference_router] if tasks.embed is not None or tasks.classify is not None else []),
        *([score_router] if tasks.score is not None else []),
        *([sparse_router] if tasks.sparse else []),
        pooling_router,
    ]


def paths(routers: Iterable[APIRouter]) -> tuple[str, ...]:
    """The paths of `routers`' routes, in order, each once."""
    return tuple(dict.fromkeys(route.path for each in routers for route in each.routes))  # type: ignore[attr-defined]


def model_routes(tasks: TaskSet) -> tuple[str, ...]:
    """The model-specific routes a model with these tasks serves."""
    return paths(task_routers(tasks))


COMMON_ROUTES = paths(COMMON_ROUTERS)
