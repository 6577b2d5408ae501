"""Priority lanes over HTTP and in the Python API: a request names its lane in the body's
`priority` or the `x-priority` header, on every API family; a bad one is a 400 that says the
range; answers do not change with the lane; `/stats` and `/metrics` count by lane."""

from __future__ import annotations

import inspect
from typing import Any

import httpx
import numpy as np
import pytest

from tests.api.helpers import assert_openai_error, vectors

pytestmark = pytest.mark.anyio

TEXTS = ["The lighthouse keeper logged every passing ship.", "Rain again."]


def lane(stats: dict[str, Any], priority: int) -> dict[str, Any]:
    figures: dict[str, Any] = stats["lanes"].get(
        str(priority), {"requests": 0, "queue_seconds": 0.0, "refused": 0}
    )
    return figures


async def test_a_lane_from_the_body_or_the_header_gives_the_same_answer_and_is_counted(
    client: httpx.AsyncClient,
) -> None:
    before = (await client.get("/stats")).json()
    plain = await client.post("/v1/embeddings", json={"input": TEXTS})
    in_body = await client.post("/v1/embeddings", json={"input": TEXTS, "priority": 7})
    in_header = await client.post(
        "/v1/embeddings", json={"input": TEXTS}, headers={"x-priority": "7"}
    )
    both = await client.post(
        "/v1/embeddings", json={"input": TEXTS, "priority": -2}, headers={"x-priority": "-2"}
    )
    # TEI's and Cohere's bodies take it too (every body does), and so does the header.
    tei = await client.post("/embed", json={"inputs": TEXTS}, headers={"x-priority": "7"})
    for response in (plain, in_body, in_header, both, tei):
        assert response.status_code == 200, response.text
    reference = vectors(plain.json())
    for response in (in_body, in_header, both):
        np.testing.assert_allclose(vectors(response.json()), reference, atol=1e-6)
    np.testing.assert_allclose(np.array(tei.json()), reference, atol=1e-6)

    after = (await client.get("/stats")).json()
    assert lane(after, 7)["requests"] - lane(before, 7)["requests"] == 3
    assert lane(after, -2)["requests"] - lane(before, -2)["requests"] == 1
    assert lane(after, 0)["requests"] - lane(before, 0)["requests"] == 1
    assert after["max_background_tokens"] == int(after["max_queued_tokens"] * 0.75)
    assert after["admitted_background_tokens"] == 0

    metrics = (await client.get("/metrics")).text
    assert 'poolserve_lane_requests_total{priority="7"}' in metrics
    assert 'poolserve_lane_queue_items{priority="7"} 0.0' in metrics
    assert 'poolserve_lane_refused_requests_total{priority="7"}' in metrics


@pytest.mark.parametrize(
    ("body", "headers", "message"),
    [
        ({"priority": 11}, {}, "less than or equal to 10"),
        ({"priority": -11}, {}, "greater than or equal to -10"),
        ({"priority": 1.0}, {}, "valid integer"),
        ({}, {"x-priority": "high"}, "x-priority must be an integer from -10 (runs first)"),
        ({}, {"x-priority": "99"}, "x-priority must be an integer from -10"),
        ({"priority": 3}, {"x-priority": "4"}, "disagree"),
    ],
)
async def test_a_bad_priority_is_a_400_that_says_the_range(
    client: httpx.AsyncClient, body: dict[str, Any], headers: dict[str, str], message: str
) -> None:
    response = await client.post("/v1/embeddings", json={"input": TEXTS, **body}, headers=headers)
    error = assert_openai_error(response, 400)
    assert message in error["message"]


def test_the_python_api_takes_a_priority_on_every_method(engine: Any) -> None:
    reference = engine.embed(TEXTS)
    np.testing.assert_array_equal(engine.embed(TEXTS, priority=10), reference)
    np.testing.assert_array_equal(engine.embed_later(TEXTS, priority=-10).result(), reference)
    with pytest.raises(ValueError, match="priority must be an integer from -10"):
        engine.embed(TEXTS, priority=11)
    with pytest.raises(ValueError, match="priority must be an integer from -10"):
        engine.pool(TEXTS, priority=True)
    assert inspect.signature(engine.embed).parameters["priority"].default == 0
