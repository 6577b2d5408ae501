"""Routes and tasks a model cannot serve, and malformed score / rerank requests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from poolserve import Engine
from tests.api.helpers import assert_openai_error, load_engine, serving

pytestmark = pytest.mark.anyio

BODIES: dict[str, dict[str, Any]] = {
    "/v1/embeddings": {"input": "hello"},
    "/classify": {"input": "hello"},
    "/score": {"queries": "a", "documents": ["b"]},
    "/v1/score": {"queries": "a", "documents": ["b"]},
    "/rerank": {"query": "a", "documents": ["b"]},
    "/v1/rerank": {"query": "a", "documents": ["b"]},
    "/v2/rerank": {"query": "a", "documents": ["b"]},
    "/embed_sparse": {"inputs": "hello"},
}
SCORE_ROUTES = ["/score", "/v1/score", "/rerank", "/v1/rerank", "/v2/rerank"]
# The routes each kind serves (besides /pooling and the routes every model has).
SERVED = {
    "embedding": ["/v1/embeddings", *SCORE_ROUTES],
    "late_interaction": SCORE_ROUTES,
    "classifier": ["/classify"],
    "sparse": ["/embed_sparse"],
}
# The /pooling tasks each kind runs.
TASKS = {
    "embedding": ["embed", "token_embed"],
    "late_interaction": ["token_embed"],
    "classifier": ["classify"],
    "sparse": ["sparse"],
}
ALL_TASKS = ["embed", "token_embed", "classify", "token_classify", "sparse"]


@pytest.fixture(scope="module")
def tiny_engines(
    colbert_dir: Path, classifier_dir: Path, splade_dir: Path
) -> Iterator[dict[str, Engine]]:
    engines = {
        "late_interaction": load_engine(colbert_dir),
        "classifier": load_engine(classifier_dir),
        "sparse": load_engine(splade_dir),
    }
    try:
        yield engines
    finally:
        for engine in engines.values():
            engine.close()


@pytest.fixture(params=list(SERVED))
async def kind_client(
    request: pytest.FixtureRequest, tiny_engines: dict[str, Engine]
) -> AsyncIterator[tuple[str, httpx.AsyncClient]]:
    kind: str = request.param
    engine: Engine = (
        request.getfixturevalue("engine") if kind == "embedding" else tiny_engines[kind]
    )
    assert engine.kind == kind
    async with serving(engine) as http:
        yield kind, http


async def test_routes_a_model_does_not_serve_are_404(
    kind_client: tuple[str, httpx.AsyncClient],
) -> None:
    kind, client = kind_client
    served = SERVED[kind]
    for path, body in BODIES.items():
        response = await client.post(path, json=body)
        if path in served:
            assert response.status_code == 200, (path, response.text)
            continue
        error = assert_openai_error(response, 404)
        message = error["message"]
        assert path in message
        assert kind in message
        for route in [*served, "/pooling"]:
            assert route in message, (route, message)


async def test_pooling_rejects_tasks_the_model_cannot_run(
    kind_client: tuple[str, httpx.AsyncClient],
) -> None:
    kind, client = kind_client
    for task in ALL_TASKS:
        response = await client.post("/pooling", json={"input": "hello", "task": task})
        if task in TASKS[kind]:
            assert response.status_code == 200, (task, response.text)
            continue
        error = assert_openai_error(response, 400)
        assert "Unsupported task" in error["message"]
        assert repr(task) in error["message"]
        assert error["param"] == "task"
        supported = error["message"].split("supports:")[-1]
        assert sorted(part.strip() for part in supported.split(",")) == sorted(TASKS[kind])


async def test_unknown_pooling_task_is_400(client: httpx.AsyncClient) -> None:
    error = assert_openai_error(
        await client.post("/pooling", json={"input": "x", "task": "generate"}), 400
    )
    assert error["param"] == "task"


# Malformed score and rerank requests, on the embedding model.


@pytest.mark.parametrize("path", ["/score", "/v1/score"])
async def test_score_needs_one_to_n_or_n_to_n(client: httpx.AsyncClient, path: str) -> None:
    body = {"queries": ["q1", "q2"], "documents": ["d1", "d2", "d3"]}
    error = assert_openai_error(await client.post(path, json=body), 400)
    assert "1:N" in error["message"]
    assert "N:N" in error["message"]
    assert "2 queries" in error["message"]
    assert "3 documents" in error["message"]


@pytest.mark.parametrize(
    "body",
    [
        {"queries": "q"},
        {"documents": ["d"]},
        {"text_1": "q"},
        {},
        {"queries": "q", "documents": []},
        {"queries": [], "documents": ["d"]},
        {"queries": "q", "documents": ["d", ""]},
        {"queries": "", "documents": ["d"]},
        {"queries": "q", "documents": [1, 2]},
    ],
    ids=[
        "no documents",
        "no queries",
        "no text_2",
        "nothing",
        "empty documents",
        "empty queries",
        "empty document",
        "empty query",
        "numbers",
    ],
)
async def test_score_bad_sides_are_400(client: httpx.AsyncClient, body: dict[str, Any]) -> None:
    assert_openai_error(await client.post("/score", json=body), 400)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"text_1": "q"}, "text_2"),
        ({"queries": "q", "text_1": "q", "documents": ["d"]}, "text_1"),
        ({"text_1": "q", "text_2": ["d", ""]}, "text_2"),
        ({"text_1": ["", "q"], "text_2": ["d", "d"]}, "text_1"),
        (
            {
                "text_1": "q",
                "text_2": {"content": [{"type": "image_url", "image_url": {"url": "x.png"}}]},
            },
            "text_2",
        ),
    ],
    ids=[
        "no text_2",
        "queries and text_1",
        "empty text_2 item",
        "empty text_1 item",
        "image in text_2 of a text model",
    ],
)
async def test_score_errors_name_the_fields_the_body_used(
    client: httpx.AsyncClient, body: dict[str, Any], param: str
) -> None:
    """vLLM's older `text_1`/`text_2` are named as sent, not as `queries`/`documents`."""
    error = assert_openai_error(await client.post("/score", json=body), 400)
    assert error["param"] == param, error


@pytest.mark.parametrize("path", ["/rerank", "/v1/rerank", "/v2/rerank"])
@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"query": "q"}, "documents"),
        ({"query": "q", "documents": []}, "documents"),
        ({"query": "q", "documents": ["d", ""]}, "documents"),
        ({"query": "q", "documents": [{"text": ""}]}, "documents"),
        ({"query": "q", "documents": [{"content": "d"}]}, "documents"),
        ({"query": "", "documents": ["d"]}, "query"),
        ({"documents": ["d"]}, "query"),
        ({"query": "q", "documents": ["d"], "top_n": -1}, "top_n"),
        ({"query": "q", "documents": ["d"], "top_n": "2"}, "top_n"),
        ({"query": "q", "documents": ["d"], "max_tokens_per_doc": 0}, "max_tokens_per_doc"),
    ],
    ids=[
        "no documents",
        "empty documents",
        "empty document",
        "empty document object",
        "document without text",
        "empty query",
        "no query",
        "negative top_n",
        "string top_n",
        "zero max_tokens_per_doc",
    ],
)
async def test_rerank_bad_requests_are_400(
    client: httpx.AsyncClient, path: str, body: dict[str, Any], param: str
) -> None:
    error = assert_openai_error(await client.post(path, json=body), 400)
    assert error["param"] is not None
    assert error["param"].startswith(param), error
