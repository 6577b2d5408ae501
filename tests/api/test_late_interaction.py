"""A ColBERT (late interaction) model over HTTP: MaxSim scores against PyLate's computation.

The reference (`colbert_reference_scores`) rebuilds PyLate's inputs (marker after [CLS], query and
document lengths) and scores in float64; poolserve must agree to 1e-4 relative, end to end.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from poolserve import Engine
from tests.api.helpers import load_engine, post_ok, serving
from tests.reference import WORDS
from tests.tiny_models import (
    COLBERT_DOCUMENT_LENGTH,
    COLBERT_QUERY_LENGTH,
    colbert_reference_scores,
)

pytestmark = pytest.mark.anyio

RTOL = 1e-4
QUERY = "What is the capital of France?"
DOCUMENTS = [
    "Paris is the capital of France.",
    "Berlin, the capital of Germany, is a city of museums!",
    "bananas",
    "The Eiffel Tower stands in Paris.",
    "France borders Spain, Italy, Germany and Belgium.",
    "How to bake sourdough bread at home.",
    "Lyon is known for its food.",
    "capital",
    "The stock market closed higher today after a volatile week of trading.",
    "Rome was not built in a day.",
]


def many_documents(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 30))) for _ in range(count)]


@pytest.fixture(scope="module")
def colbert_engine(colbert_dir: Path) -> Iterator[Engine]:
    with load_engine(colbert_dir) as engine:
        yield engine


@pytest.fixture
async def client(colbert_engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    async with serving(colbert_engine) as http:
        yield http


def score_values(body: dict[str, Any]) -> np.ndarray:
    assert [item["index"] for item in body["data"]] == list(range(len(body["data"])))
    return np.array([item["score"] for item in body["data"]], dtype=np.float64)


def assert_rerank_equals(body: dict[str, Any], documents: list[str], expected: np.ndarray) -> None:
    """The whole rerank response: order, indices, scores and document texts."""
    assert len(set(expected.tolist())) == len(expected), "ties would make the order ambiguous"
    results = body["results"]
    assert [r["index"] for r in results] == np.argsort(-expected).tolist()
    np.testing.assert_allclose(
        [r["relevance_score"] for r in results], np.sort(expected)[::-1], rtol=RTOL
    )
    assert [r["document"]["text"] for r in results] == [documents[r["index"]] for r in results]


async def test_score_one_query_many_documents(client: httpx.AsyncClient, colbert_dir: Path) -> None:
    body = await post_ok(client, "/score", {"queries": QUERY, "documents": DOCUMENTS})
    expected = colbert_reference_scores(colbert_dir, QUERY, DOCUMENTS)
    np.testing.assert_allclose(score_values(body), expected, rtol=RTOL)


async def test_score_n_to_n(client: httpx.AsyncClient, colbert_dir: Path) -> None:
    queries = ["capital of France", "bread", "stock market news"]
    documents = DOCUMENTS[:3]
    body = await post_ok(client, "/score", {"text_1": queries, "text_2": documents})
    expected = [
        colbert_reference_scores(colbert_dir, q, [d])[0]
        for q, d in zip(queries, documents, strict=True)
    ]
    np.testing.assert_allclose(score_values(body), expected, rtol=RTOL)


async def test_rerank_equals_reference_end_to_end(
    client: httpx.AsyncClient, colbert_dir: Path
) -> None:
    body = await post_ok(client, "/rerank", {"query": QUERY, "documents": DOCUMENTS})
    expected = colbert_reference_scores(colbert_dir, QUERY, DOCUMENTS)
    assert_rerank_equals(body, DOCUMENTS, expected)
    assert body["results"][0]["index"] == 0  # "Paris is the capital of France."


async def test_rerank_over_several_tokenization_chunks(
    client: httpx.AsyncClient, colbert_dir: Path
) -> None:
    """More documents than one tokenization chunk (64): every one still gets its marker."""
    documents = many_documents(70, seed=1)
    query = "river city capital"
    body = await post_ok(client, "/v1/rerank", {"query": query, "documents": documents})
    assert_rerank_equals(body, documents, colbert_reference_scores(colbert_dir, query, documents))


async def test_concurrent_requests_are_scored_independently(
    client: httpx.AsyncClient, colbert_dir: Path
) -> None:
    """Queries and documents of several requests share batches; no scores get mixed up."""
    requests = [
        (f"{word} {QUERY}", many_documents(8, seed=seed)) for seed, word in enumerate(WORDS[:5])
    ]
    bodies = await asyncio.gather(
        *(
            post_ok(client, "/rerank", {"query": query, "documents": documents})
            for query, documents in requests
        )
    )
    for (query, documents), body in zip(requests, bodies, strict=True):
        assert_rerank_equals(
            body, documents, colbert_reference_scores(colbert_dir, query, documents)
        )


async def test_each_text_is_encoded_once(client: httpx.AsyncClient) -> None:
    """One query and ten documents: eleven forward-pass items, not one query per document."""
    before = (await client.get("/stats")).json()["items"]
    await post_ok(client, "/rerank", {"query": QUERY, "documents": DOCUMENTS})
    after = (await client.get("/stats")).json()["items"]
    assert after - before == 1 + len(DOCUMENTS)


async def test_long_query_is_cut_to_the_query_length(
    client: httpx.AsyncClient, colbert_dir: Path
) -> None:
    """PyLate encodes queries at most `query_length` (32) tokens long, marker included."""
    query = " ".join(["capital"] * 2 * COLBERT_QUERY_LENGTH)
    body = await post_ok(client, "/score", {"queries": query, "documents": DOCUMENTS[:3]})
    expected = colbert_reference_scores(colbert_dir, query, DOCUMENTS[:3])
    np.testing.assert_allclose(score_values(body), expected, rtol=RTOL)


async def test_long_document_truncated_like_pylate(
    client: httpx.AsyncClient, colbert_dir: Path
) -> None:
    """With truncation, a long document is cut where PyLate cuts it: `document_length` (180)
    tokens including the marker, i.e. max_seq_length (179) tokens from the tokenizer."""
    long_document = " ".join(WORDS * 3)
    documents = [DOCUMENTS[0], long_document]
    body = await post_ok(
        client,
        "/score",
        {"queries": "capital", "documents": documents, "truncate_prompt_tokens": -1},
    )
    expected = colbert_reference_scores(colbert_dir, "capital", documents)
    np.testing.assert_allclose(score_values(body), expected, rtol=RTOL)
    # [CLS] marker capital [SEP] + the short document + the long one at its full length.
    short = len(DOCUMENTS[0].split()) + 1  # "paris is the capital of france ." = 7 tokens
    assert body["usage"]["prompt_tokens"] == 4 + (short + 3) + COLBERT_DOCUMENT_LENGTH
