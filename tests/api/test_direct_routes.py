"""Our routes are dispatched directly, past FastAPI's routing; errors keep the app's shape, and
whatever is not an exact (method, path) of ours still reaches FastAPI."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi import APIRouter, FastAPI, Request
from starlette.responses import JSONResponse, Response

from poolserve.errors import InvalidRequestError
from poolserve.server.error_responses import install_error_handlers
from poolserve.server.middleware.dispatch import DirectRouteMiddleware, direct_endpoints
from tests.api.helpers import assert_openai_error

pytestmark = pytest.mark.anyio

router = APIRouter()


@router.post("/direct")
async def direct(request: Request) -> Response:
    # FastAPI's router records the matched route in the scope; the direct path does not.
    return JSONResponse({"via_fastapi": "route" in request.scope, "body": await request.json()})


@router.post("/invalid")
async def invalid(request: Request) -> Response:
    raise InvalidRequestError("input is empty; send at least one", param="input")


@router.post("/broken")
async def broken(request: Request) -> Response:
    raise RuntimeError("internal detail that must not leak")


@router.get("/items/{name}")
async def item(name: str) -> Response:
    return JSONResponse({"name": name})


def make_app() -> FastAPI:
    app = FastAPI()
    app.add_middleware(DirectRouteMiddleware, routes=router.routes)
    install_error_handlers(app)
    app.include_router(router)
    return app


@pytest.fixture
async def client() -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=make_app(), raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url="http://t")


def test_only_request_only_routes_without_path_parameters_are_direct() -> None:
    assert set(direct_endpoints(router.routes)) == {
        ("POST", "/direct"),
        ("POST", "/invalid"),
        ("POST", "/broken"),
    }


async def test_a_direct_route_skips_fastapi_routing(client: httpx.AsyncClient) -> None:
    response = await client.post("/direct", json={"a": 1})
    assert response.status_code == 200
    assert response.json() == {"via_fastapi": False, "body": {"a": 1}}


async def test_errors_have_the_apps_shape(client: httpx.AsyncClient) -> None:
    error = assert_openai_error(await client.post("/invalid", json={}), 400)
    assert error["param"] == "input"
    response = await client.post("/broken", json={})
    error = assert_openai_error(response, 500)
    assert "internal detail" not in response.text


async def test_everything_else_reaches_fastapi(client: httpx.AsyncClient) -> None:
    assert (await client.get("/items/x")).json() == {"name": "x"}
    assert (await client.get("/direct")).status_code == 405
    assert_openai_error(await client.post("/nowhere", json={}), 404)


def test_the_app_dispatches_every_route_of_the_model_directly(engine: Any) -> None:
    from poolserve.app import create_app

    app = create_app(engine.service)
    # Our layers stand in front of FastAPI's: none of FastAPI's is on the way to our routes.
    layers: list[str] = []
    layer: Any = app.middleware_stack
    while not isinstance(layer, DirectRouteMiddleware):
        layers.append(type(layer).__name__)
        layer = layer.app
    posts = {path for method, path in layer.table if method == "POST"}
    assert {"/v1/embeddings", "/pooling", "/score", "/rerank", "/tokenize"} <= posts
    assert ("GET", "/health") in layer.table
    expected = (
        "HotRoutes MetricsMiddleware UnexpectedErrorMiddleware BodyLimitMiddleware "
        "AdmissionMiddleware"
    )
    assert layers == expected.split()
    # The hot routes take the POST routes that do work; the Batch API's uploads stay layered.
    hot = app.middleware_stack.table
    assert {"/v1/embeddings", "/pooling", "/score", "/rerank", "/tokenize"} <= set(hot)
    assert not any(path.startswith(("/v1/files", "/v1/batches")) for path in hot)
    # A layer added later would sit behind the dispatch, which our routes never pass: refused.
    with pytest.raises(RuntimeError):
        app.add_middleware(DirectRouteMiddleware, routes=[])
