"""Helpers shared by the API tests."""

from __future__ import annotations

from typing import Any

import httpx
import numpy as np


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
