"""Helpers shared by the API tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from asgi_lifespan import LifespanManager

from poolserve import Engine, ModelConfig, ServerConfig
from poolserve.app import create_app


async def embed(client: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    """POST /v1/embeddings and return the body of a successful response."""
    response = await client.post("/v1/embeddings", json=body)
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()
    return data


def vectors(body: dict[str, Any]) -> np.ndarray:
    data = body["data"]
    assert [item["index"] for item in data] == list(range(len(data)))
    return np.array([item["embedding"] for item in data], dtype=np.float32)


def assert_openai_error(response: httpx.Response, status: int) -> dict[str, Any]:
    """The response is `status` with the OpenAI error shape; returns the error object."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert "Traceback" not in response.text
    body = response.json()
    assert set(body) == {"error"}
    error: dict[str, Any] = body["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str)
    assert error["message"]
    assert error["code"] == status
    return error


def load_engine(directory: Path) -> Engine:
    """An fp32 engine over a model directory (close it when done)."""
    return Engine(model_config=ModelConfig(model=str(directory), dtype="float32"))


@asynccontextmanager
async def serving(
    engine: Engine, config: ServerConfig | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    """A client of a fresh app over `engine` (the app's shutdown leaves the engine open)."""
    app = create_app(engine.service, config or ServerConfig())
    async with (
        LifespanManager(app) as manager,
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=manager.app),
            base_url="http://poolserve.test",
            timeout=120,
        ) as http,
    ):
        yield http


async def post_ok(client: httpx.AsyncClient, path: str, body: Any) -> Any:
    """POST `body` to `path` and return the JSON of a successful response."""
    response = await client.post(path, json=body)
    assert response.status_code == 200, response.text
    return response.json()
