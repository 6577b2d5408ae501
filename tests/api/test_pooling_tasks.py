"""The embedding model's other tasks: /score and /rerank (cosine), /pooling embed and token_embed,
against sentence-transformers on all-MiniLM-L6-v2."""

from __future__ import annotations

from typing import Any

import httpx
import numpy as np
import pytest

from tests.api.helpers import embed, post_ok, vectors
from tests.reference import DIM

pytestmark = pytest.mark.anyio

QUERIES = ["How do I bake bread?", "What is the capital of France?", "best running shoes"]
DOCUMENTS = [
    "Mix flour, water, yeast and salt, knead the dough, let it rise, then bake it for 40 minutes.",
    "Paris is the capital and largest city of France.",
    "The stock market fell sharply on Monday.",
    "Penguins live in the southern hemisphere.",
]


def st_cosines(st_model: Any, queries: list[str], documents: list[str]) -> np.ndarray:
    """Cosine of sentence-transformers embeddings of each (query, document) pair, float64."""
    q = st_model.encode(queries, convert_to_numpy=True).astype(np.float64)
    d = st_model.encode(documents, convert_to_numpy=True).astype(np.float64)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    return np.sum(q * d, axis=1)


def scores(body: dict[str, Any]) -> np.ndarray:
    assert [item["index"] for item in body["data"]] == list(range(len(body["data"])))
    return np.array([item["score"] for item in body["data"]])


@pytest.mark.parametrize(
    ("queries", "documents"),
    [
        (QUERIES[0], DOCUMENTS[0]),
        (QUERIES[0], DOCUMENTS),
        (QUERIES, DOCUMENTS[:3]),
    ],
    ids=["1:1", "1:N", "N:N"],
)
async def test_score_is_cosine_of_sentence_transformers(
    client: httpx.AsyncClient, st_model: Any, queries: Any, documents: Any
) -> None:
    body = await post_ok(client, "/score", {"queries": queries, "documents": documents})
    q = [queries] if isinstance(queries, str) else queries
    d = [documents] if isinstance(documents, str) else documents
    expected = st_cosines(st_model, q * len(d) if len(q) == 1 else q, d)
    np.testing.assert_allclose(scores(body), expected, atol=1e-5, rtol=0)
    # text_1 / text_2 are the same thing under vLLM's older names.
    old = await post_ok(client, "/v1/score", {"text_1": queries, "text_2": documents})
    np.testing.assert_allclose(scores(old), scores(body), atol=1e-6, rtol=0)


async def test_a_cosine_score_never_passes_one(client: httpx.AsyncClient) -> None:
    """A text scored against itself is 1, not 1.0000000000000002 (float64 rounding of a unit
    vector's dot product with itself, seen for these texts)."""
    texts = ["fox", "fox jumps over", "keeps", "The quick brown fox jumps over the lazy"]
    body = await post_ok(client, "/score", {"queries": texts, "documents": texts})
    assert all(-1.0 <= value <= 1.0 for value in scores(body)), scores(body)
    assert max(scores(body)) == 1.0


async def test_rerank_puts_the_relevant_document_first(
    client: httpx.AsyncClient, st_model: Any
) -> None:
    documents = [
        "The stock market fell sharply on Monday.",
        "Mix flour, water, yeast and salt, knead the dough, let it rise, then bake it.",
        "Penguins live in the southern hemisphere.",
    ]
    body = await post_ok(
        client, "/rerank", {"query": "How do I bake bread?", "documents": documents}
    )
    results = body["results"]
    assert results[0]["index"] == 1
    assert results[0]["document"]["text"] == documents[1]
    assert results[0]["relevance_score"] > results[1]["relevance_score"] + 0.2
    expected = st_cosines(st_model, ["How do I bake bread?"] * 3, documents)
    np.testing.assert_allclose(
        [r["relevance_score"] for r in results], np.sort(expected)[::-1], atol=1e-5, rtol=0
    )
    assert [r["index"] for r in results] == np.argsort(-expected).tolist()


async def test_bi_encoder_encodes_each_text_once(client: httpx.AsyncClient) -> None:
    before = (await client.get("/stats")).json()["items"]
    await post_ok(client, "/rerank", {"query": QUERIES[0], "documents": DOCUMENTS})
    after = (await client.get("/stats")).json()["items"]
    assert after - before == 1 + len(DOCUMENTS)


async def test_pooling_embed_equals_embeddings(client: httpx.AsyncClient) -> None:
    texts = [*QUERIES, *DOCUMENTS]
    expected = vectors(await embed(client, input=texts))
    for request in ({"input": texts, "task": "embed"}, {"input": texts}):
        body = await post_ok(client, "/pooling", request)
        assert [item["index"] for item in body["data"]] == list(range(len(texts)))
        assert {item["object"] for item in body["data"]} == {"pooling"}
        got = np.array([item["data"] for item in body["data"]], dtype=np.float32)
        assert got.shape == (len(texts), DIM)
        np.testing.assert_allclose(got, expected, atol=1e-6, rtol=0)


async def test_pooling_token_embed_one_vector_per_token(
    client: httpx.AsyncClient, st_model: Any
) -> None:
    texts = [QUERIES[0], DOCUMENTS[0], "x"]
    body = await post_ok(client, "/pooling", {"input": texts, "task": "token_embed"})
    raw = await post_ok(
        client, "/pooling", {"input": texts, "task": "token_embed", "normalize": False}
    )
    for text, item, unnormalized in zip(texts, body["data"], raw["data"], strict=True):
        count = (await post_ok(client, "/tokenize", {"prompt": text}))["count"]
        tokens = np.array(item["data"])
        assert tokens.shape == (count, DIM)
        np.testing.assert_allclose(np.linalg.norm(tokens, axis=1), 1.0, rtol=1e-5)
        # Unnormalized, they are sentence-transformers' token embeddings.
        expected = st_model.encode(text, output_value="token_embeddings").numpy()
        np.testing.assert_allclose(np.array(unnormalized["data"]), expected, atol=1e-4, rtol=1e-4)
    assert body["usage"]["prompt_tokens"] == sum(len(item["data"]) for item in body["data"])


async def test_pooling_base64_decodes_to_the_float_output(client: httpx.AsyncClient) -> None:
    """encoding_format base64: little-endian float32 bytes, row-major, as OpenAI clients read."""
    import base64

    texts = ["a short one", "and a somewhat longer second input"]
    for task in ("embed", "token_embed"):
        floats = await post_ok(client, "/pooling", {"input": texts, "task": task})
        packed = await post_ok(
            client, "/pooling", {"input": texts, "task": task, "encoding_format": "base64"}
        )
        for plain, encoded in zip(floats["data"], packed["data"], strict=True):
            expected = np.asarray(plain["data"], dtype=np.float32)
            decoded = np.frombuffer(base64.b64decode(encoded["data"]), dtype="<f4")
            # Two requests may be batched differently (threads, lent cores): the last bits may
            # differ; a wrong byte order or layout would not be close at all.
            np.testing.assert_allclose(decoded, expected.reshape(-1), rtol=1e-5, atol=1e-6)
