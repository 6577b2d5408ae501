"""The result cache (--cache-bytes): a repeat answered without the model in the same bytes, never a
vector of other parameters, one computation for identical requests in flight, and its memory
under its bound through a random mix of requests."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from benchmarks import corpus
from poolserve import Engine, EngineConfig, ModelConfig
from tests.api.helpers import serving
from tests.reference import assert_close_vectors

pytestmark = pytest.mark.anyio

CACHE_BYTES = 256 * 1024


@pytest.fixture(scope="module")
def cached() -> Iterator[Engine]:
    config = EngineConfig(cache_bytes=CACHE_BYTES)
    with Engine(model_config=ModelConfig(dtype="float32"), engine_config=config) as engine:
        yield engine


def stats(engine: Engine) -> Any:
    assert engine.service.core.cache is not None
    return engine.service.core.cache.stats()


def model_items(engine: Engine) -> int:
    """Inputs the model has run (the engine's own counter)."""
    return engine.service.core.stats.snapshot().items


async def test_a_repeat_is_answered_without_the_model_in_the_same_bytes(cached: Engine) -> None:
    texts = corpus.sentences(2000)[1000:1020]
    async with serving(cached) as client:
        for options in ({}, {"encoding_format": "base64"}, {"embed_dtype": "int8"}):
            first = await client.post("/v1/embeddings", json={"input": texts, **options})
            before, ran = stats(cached), model_items(cached)
            again = await client.post("/v1/embeddings", json={"input": texts, **options})
            assert again.status_code == first.status_code == 200
            assert again.json()["data"] == first.json()["data"]
            assert stats(cached).hits - before.hits == len(texts)
            assert model_items(cached) == ran
        body = (await client.get("/stats")).json()
        assert body["cache_hits"] >= 2 * len(texts) and body["cache_max_bytes"] == CACHE_BYTES
        metrics = (await client.get("/metrics")).text
        assert 'poolserve_cache_hits_total{model="sentence-transformers/all-MiniLM-L6-v2"}' in (
            metrics
        )
        assert "poolserve_cache_bytes" in metrics


def test_a_hit_is_never_a_vector_of_other_parameters(cached: Engine, engine: Any) -> None:
    texts = corpus.sentences(2000)[1100:1110]
    cached.embed(texts)  # cached as the model computed them
    variants: list[dict[str, Any]] = [
        {"normalize": False},
        {"dimensions": 32},
        {"prompt": "query: "},
        {"truncate_prompt_tokens": 6},
    ]
    for options in variants:
        actual = cached.embed(texts, **options)
        expected = engine.embed(texts, **options)  # no cache
        assert actual.shape == expected.shape, options
        assert_close_vectors(actual, expected)
        np.testing.assert_allclose(
            np.linalg.norm(actual, axis=1), np.linalg.norm(expected, axis=1), rtol=1e-5
        )


def test_identical_requests_in_flight_run_once(cached: Engine) -> None:
    texts = corpus.sentences(2000)[1200:1240]
    ran = model_items(cached)
    futures = [cached.embed_later(texts) for _ in range(8)]
    results = [future.result(timeout=60) for future in futures]
    assert model_items(cached) - ran == len(texts)
    for result in results[1:]:
        np.testing.assert_array_equal(result, results[0])


def test_waiters_run_themselves_when_the_leader_is_cancelled(cached: Engine, engine: Any) -> None:
    busy = cached.embed_later(corpus.passages(200)[:64])  # holds the runners a moment
    texts = corpus.sentences(2000)[1300:1330]
    leader = cached.embed_later(texts)
    follower = cached.embed_later(texts)
    leader.cancel()
    assert_close_vectors(follower.result(timeout=60), engine.embed(texts))
    busy.result(timeout=60)


def test_memory_stays_under_the_bound_through_a_random_mix(cached: Engine, engine: Any) -> None:
    rng = random.Random(21)
    pool = corpus.sentences(2000)[:600]
    before = stats(cached)
    for _ in range(60):
        texts = rng.sample(pool[: rng.choice((40, 600))], rng.randint(1, 24))
        options = rng.choice(({}, {"dimensions": 64}, {"prompt": "passage: "}))
        actual = cached.embed(texts, **options)
        assert_close_vectors(actual, engine.embed(texts, **options))
        now = stats(cached)
        assert now.bytes <= CACHE_BYTES, now
    assert now.hits > before.hits and now.evictions > before.evictions, now
