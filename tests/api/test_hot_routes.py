"""The hot routes (server/hot_routes.py) answer as the edge's layers do: the same statuses, bodies
and headers for answers and every refusal the edge makes, requests from a browser page (CORS) and
sampled traces go through the layers, and a sampled request is traced once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest
from asgi_lifespan import LifespanManager

from poolserve import ServerConfig
from poolserve.app import create_app
from poolserve.observe.tracing import RequestMarks
from tests.api.helpers import serving

pytestmark = pytest.mark.anyio

ORIGIN = "https://app.example"
KEY = {"authorization": "Bearer secret"}
# Headers that differ between two answers to the same request (or that only CORS adds).
VARYING = {"x-request-id", "x-queue-time", "x-inference-time", "x-total-time", "date"}


def chunked(body: bytes) -> AsyncIterator[bytes]:
    """`body` without a Content-Length, in two chunks."""

    async def chunks() -> AsyncIterator[bytes]:
        yield body[: len(body) // 2]
        yield body[len(body) // 2 :]

    return chunks()


# (path, body bytes, headers, chunked): an answer and each refusal the edge or a route makes.
CASES: dict[str, tuple[str, bytes, dict[str, str], bool]] = {
    "answer": ("/v1/embeddings", b'{"input": ["a sentence", "another"]}', KEY, False),
    "chunked answer": ("/v1/embeddings", b'{"input": "one sentence"}', KEY, True),
    "no key": ("/v1/embeddings", b'{"input": "x"}', {}, False),
    "wrong key": ("/v1/embeddings", b'{"input": "x"}', {"authorization": "Bearer no"}, False),
    "too large": ("/v1/embeddings", b'{"input": "' + b"x" * 5000 + b'"}', KEY, False),
    "too large chunked": ("/v1/embeddings", b'{"input": "' + b"x" * 5000 + b'"}', KEY, True),
    "not JSON": ("/v1/embeddings", b"input=x", KEY, False),
    "unknown field": ("/v1/embeddings", b'{"input": "x", "colour": 1}', KEY, False),
    "bad priority": ("/v1/embeddings", b'{"input": "x"}', {**KEY, "x-priority": "soon"}, False),
    "rerank": ("/rerank", b'{"query": "q", "texts": ["a", "b"]}', KEY, False),
    "score family error": ("/score", b'{"text_1": "q"}', KEY, False),
}


async def answer(
    client: httpx.AsyncClient, case: tuple[str, bytes, dict[str, str], bool], origin: bool
) -> tuple[int, Any, dict[str, str]]:
    path, body, headers, is_chunked = case
    headers = {
        **headers,
        "content-type": "application/json",
        **({"origin": ORIGIN} if origin else {}),
    }
    content = chunked(body) if is_chunked else body
    response = await client.post(path, content=content, headers=headers)
    kept = {
        name: value
        for name, value in response.headers.items()
        if name not in VARYING and not name.startswith("access-control-") and name != "vary"
    }
    data = orjson.loads(response.content)
    if isinstance(data, dict):
        data.pop("id", None)
    return response.status_code, data, kept


async def test_the_hot_routes_answer_as_the_layers_do(engine: Any) -> None:
    config = ServerConfig(allowed_origins=(ORIGIN,), api_keys=("secret",), max_request_bytes=4096)
    async with serving(engine, config) as client:
        for name, case in CASES.items():
            hot = await answer(client, case, origin=False)
            layered = await answer(client, case, origin=True)
            assert hot == layered, name
        statuses = {
            name: (await answer(client, case, origin=False))[0] for name, case in CASES.items()
        }
    assert statuses == {
        "answer": 200,
        "chunked answer": 200,
        "no key": 401,
        "wrong key": 401,
        "too large": 413,
        "too large chunked": 413,
        "not JSON": 400,
        "unknown field": 400,
        "bad priority": 400,
        "rerank": 200,
        "score family error": 400,
    }


async def test_every_answer_carries_the_request_id_it_came_with(engine: Any) -> None:
    async with serving(engine) as client:
        bodies: list[dict[str, Any]] = [{"input": "x"}, {"input": []}, {"colour": 1}]
        for body in bodies:
            response = await client.post(
                "/v1/embeddings", json=body, headers={"x-request-id": "r-1"}
            )
            assert response.headers["x-request-id"] == "r-1", body
        new = await client.post("/v1/embeddings", json={"input": "x"})
        assert new.headers["x-request-id"] and new.headers["x-request-id"] != "r-1"


async def test_a_sampled_request_is_traced_once_whatever_a_second_draw_would_say(
    engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hot routes draw a request's sampling once and hand the sampled ones to the layers,
    which trace them without drawing again: with draws that say yes, then no, then yes, ...,
    every other request is traced, each once."""
    config = ServerConfig(otlp_endpoint="http://127.0.0.1:9", trace_sample_ratio=0.5)
    app = create_app(engine.service, config)
    async with (
        LifespanManager(app) as manager,
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=manager.app), base_url="http://poolserve.test"
        ) as client,
    ):
        tracing = app.state.serving.tracing
        draws = iter([True, False] * 10)
        monkeypatch.setattr(tracing, "wants", lambda traceparent: next(draws))
        recorded: list[RequestMarks] = []
        monkeypatch.setattr(tracing, "record", recorded.append)
        for _ in range(6):
            assert (await client.post("/v1/embeddings", json={"input": "x"})).status_code == 200
        assert len(recorded) == 3
        assert all(marks.name == "POST /v1/embeddings" for marks in recorded)
