"""Voyage AI's own SDK (`voyageai.Client(base_url=...)`, and its async client) against a real
server: embeddings in every output type it decodes, Matryoshka prefixes and reranking, checked
against sentence-transformers; a refusal is the SDK's own error."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
import voyageai
import voyageai.error

from tests.reference import FP32_COSINE, MODEL_ID, assert_close_vectors, prose

pytestmark = pytest.mark.slow  # a real server process

TEXTS = ["The quick brown fox", "jumps over the lazy dog", "Serving embeddings well"]
LONG = prose(random.Random(0), 400)  # past the model's 256 tokens


def client(server_url: str) -> voyageai.Client:
    return voyageai.Client(api_key="unused", base_url=f"{server_url}/v1", timeout=120)


def test_embed_floats_and_every_compact_type(server_url: str, st_model: Any) -> None:
    from sentence_transformers.util.quantization import quantize_embeddings

    voyage = client(server_url)
    result = voyage.embed(TEXTS, model=MODEL_ID, input_type="document")
    floats = np.array(result.embeddings, dtype=np.float32)
    assert_close_vectors(floats, st_model.encode(TEXTS), FP32_COSINE, TEXTS)
    tokens = sum(len(st_model.tokenizer(text)["input_ids"]) for text in TEXTS)
    assert result.total_tokens == tokens
    # The client asks for base64 and decodes each type's bytes itself.
    typed = {
        kind: np.array(voyage.embed(TEXTS, model=MODEL_ID, output_dtype=kind).embeddings)
        for kind in ("int8", "uint8", "binary", "ubinary")
    }
    assert typed["int8"].shape == floats.shape
    assert np.abs(typed["int8"]).max(axis=1).tolist() == [127] * len(TEXTS)
    np.testing.assert_array_equal(typed["uint8"], typed["int8"].astype(np.int16) + 128)
    for kind in ("binary", "ubinary"):
        np.testing.assert_array_equal(typed[kind], quantize_embeddings(floats, precision=kind))


def test_output_dimension_keeps_a_normalized_prefix(server_url: str, st_model: Any) -> None:
    result = client(server_url).embed(TEXTS, model=MODEL_ID, output_dimension=128)
    prefix = st_model.encode(TEXTS)[:, :128]
    expected = prefix / np.linalg.norm(prefix, axis=1, keepdims=True)
    assert_close_vectors(np.array(result.embeddings), expected, FP32_COSINE)


def test_rerank_orders_by_the_models_similarity(server_url: str, st_model: Any) -> None:
    query = "a fast animal"
    documents = ["a parked car", "the quick brown fox runs", "tax law", "a cheetah sprinting"]
    result = client(server_url).rerank(query, documents, model=MODEL_ID, top_k=3)
    vectors = st_model.encode([query, *documents], normalize_embeddings=True)
    similarity = vectors[1:] @ vectors[0]
    best = np.argsort(-similarity)[:3]
    assert [r.index for r in result.results] == best.tolist()
    assert [r.document for r in result.results] == [documents[i] for i in best]
    np.testing.assert_allclose(
        [r.relevance_score for r in result.results], similarity[best], atol=1e-4
    )
    assert result.total_tokens > 0


def test_truncation_false_refuses_a_long_input_in_voyages_shape(server_url: str) -> None:
    with pytest.raises(voyageai.error.InvalidRequestError) as caught:
        client(server_url).embed([LONG], model=MODEL_ID, truncation=False)
    assert "truncation: true" in str(caught.value), caught.value
    # Cut by default, the same text embeds.
    assert len(client(server_url).embed([LONG], model=MODEL_ID).embeddings) == 1


@pytest.mark.anyio
async def test_the_async_client_embeds(server_url: str, st_model: Any) -> None:
    voyage = voyageai.AsyncClient(api_key="unused", base_url=f"{server_url}/v1", timeout=120)
    result = await voyage.embed(TEXTS, model=MODEL_ID, input_type="query")
    assert_close_vectors(np.array(result.embeddings), st_model.encode(TEXTS), FP32_COSINE)
