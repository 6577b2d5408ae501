"""200 concurrent requests of mixed sizes: each gets what it gets alone, and they were batched."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from typing import Any

import httpx
import numpy as np
import pytest

from tests.api.helpers import embed, vectors
from tests.reference import FP32_COSINE, UNICODE, WORDS, assert_close_vectors

pytestmark = pytest.mark.anyio

N_REQUESTS = 200


def random_text(rng: random.Random) -> str:
    # Mostly short, some medium, a few long: mixed lengths at a cost a 2-core machine can pay.
    roll = rng.random()
    n_words = rng.randint(1, 8) if roll < 0.75 else rng.randint(8, 25) if roll < 0.95 else 60
    words = [rng.choice(WORDS) for _ in range(n_words)]
    if rng.random() < 0.15:
        words.insert(rng.randrange(len(words) + 1), rng.choice(UNICODE))
    return " ".join(words)


def make_requests() -> list[list[str]]:
    rng = random.Random(7)
    sizes = [1, 1, 2, 3, 4, 5, 8, 12, 16, 20]
    return [[random_text(rng) for _ in range(rng.choice(sizes))] for _ in range(N_REQUESTS)]


async def stats(client: httpx.AsyncClient) -> dict[str, Any]:
    response = await client.get("/stats")
    assert response.status_code == 200
    body: dict[str, Any] = response.json()
    return body


def batch_sizes(snapshot: dict[str, Any]) -> Counter[int]:
    return Counter({int(size): count for size, count in snapshot["batch_sizes"].items()})


async def test_concurrent_requests_match_solo_results_and_share_batches(
    client: httpx.AsyncClient,
) -> None:
    requests = make_requests()
    before = await stats(client)
    assert {"batches", "items", "max_batch_size", "batch_sizes"} <= set(before)

    together = await asyncio.gather(*(embed(client, input=texts) for texts in requests))

    after = await stats(client)
    sizes = batch_sizes(after) - batch_sizes(before)
    batches = after["batches"] - before["batches"]
    items = sum(len(texts) for texts in requests)
    assert after["items"] - before["items"] == items
    assert sum(sizes.values()) == batches
    assert sum(size * count for size, count in sizes.items()) == items
    assert max(sizes) > 1, "nothing was batched"
    assert after["max_batch_size"] >= max(sizes)
    assert batches < N_REQUESTS, f"{batches} batches for {N_REQUESTS} requests"

    for texts, body in zip(requests, together, strict=True):
        assert len(body["data"]) == len(texts)
    # Alone: one request at a time, each its own batch(es).
    for texts, body in zip(requests, together, strict=True):
        alone = vectors(await embed(client, input=texts))
        assert_close_vectors(vectors(body), alone, FP32_COSINE, texts)


async def test_each_response_has_its_own_usage(client: httpx.AsyncClient) -> None:
    """Token counts are per request, never mixed up between concurrent requests."""
    rng = random.Random(3)
    requests = [[random_text(rng) for _ in range(rng.randint(1, 5))] for _ in range(40)]
    together = await asyncio.gather(*(embed(client, input=texts) for texts in requests))
    counts = await asyncio.gather(
        *(client.post("/tokenize", json={"prompt": text}) for texts in requests for text in texts)
    )
    per_text = iter(response.json()["count"] for response in counts)
    for texts, body in zip(requests, together, strict=True):
        assert body["usage"]["prompt_tokens"] == sum(next(per_text) for _ in texts)
    assert np.isfinite(np.concatenate([vectors(body) for body in together])).all()
