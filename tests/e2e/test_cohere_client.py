"""Cohere's own SDK (`ClientV2(base_url=...)`, and the v1 `Client`) against a real server:
every embedding type it decodes, checked against sentence-transformers; reranking an ordinary
RAG chunk longer than the model (by the SDK, and by LangChain's `CohereRerank` over it) scores it
as its text cut by hand to what fits."""

from __future__ import annotations

import base64
import random
from typing import Any

import cohere
import numpy as np
import pytest

from tests.reference import FP32_COSINE, MODEL_ID, assert_close_vectors, prose

pytestmark = pytest.mark.slow  # a real server process

TEXTS = ["The quick brown fox", "jumps over the lazy dog", "Serving embeddings well"]


def test_client_v2_embeds_every_type(server_url: str, st_model: Any) -> None:
    from sentence_transformers.util.quantization import quantize_embeddings

    client = cohere.ClientV2(base_url=server_url, api_key="unused", timeout=120)
    response = client.embed(
        model=MODEL_ID,
        input_type="search_document",
        texts=TEXTS,
        embedding_types=["float", "int8", "uint8", "binary", "ubinary", "base64"],
    )
    embeddings = response.embeddings
    assert embeddings.float_ is not None and embeddings.int8 is not None
    floats = np.array(embeddings.float_, dtype=np.float32)
    assert_close_vectors(floats, st_model.encode(TEXTS), FP32_COSINE, TEXTS)
    assert np.array(embeddings.int8).shape == floats.shape
    np.testing.assert_array_equal(np.array(embeddings.uint8), np.array(embeddings.int8) + 128)
    for kind in ("binary", "ubinary"):
        expected = quantize_embeddings(floats, precision=kind)
        np.testing.assert_array_equal(np.array(getattr(embeddings, kind)), expected)
    assert embeddings.base64 is not None
    decoded = [np.frombuffer(base64.b64decode(row), "<f4") for row in embeddings.base64]
    np.testing.assert_array_equal(np.stack(decoded), floats)
    assert response.texts == TEXTS
    assert response.meta is not None and response.meta.billed_units is not None
    tokens = sum(len(st_model.tokenizer(text)["input_ids"]) for text in TEXTS)
    assert response.meta.billed_units.input_tokens == tokens


def test_client_v1_embeds_floats(server_url: str, st_model: Any) -> None:
    client = cohere.Client(base_url=server_url, api_key="unused", timeout=120)
    response = client.embed(texts=TEXTS, model=MODEL_ID)
    assert_close_vectors(np.array(response.embeddings), st_model.encode(TEXTS), FP32_COSINE)


def test_a_bad_request_is_the_clients_bad_request_error(server_url: str) -> None:
    client = cohere.ClientV2(base_url=server_url, api_key="unused", timeout=120)
    with pytest.raises(cohere.errors.BadRequestError) as caught:
        client.embed(model=MODEL_ID, input_type="search_query", texts=["  "])
    assert "only whitespace" in str(caught.value.body)


QUERY = "how do plants turn light into sugar"
SHORT = "Photosynthesis makes sugar from light, water and carbon dioxide."
CHUNK = prose(random.Random(5), 600)  # an ordinary RAG chunk, past the model's 256 tokens


def cut_by_hand(st_model: Any, text: str) -> str:
    """The most of `text` the model takes alone: 254 tokens and its [CLS] and [SEP]."""
    offsets = st_model.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    return text[: offsets["offset_mapping"][253][1]]


def expected_scores(st_model: Any, documents: list[str]) -> np.ndarray:
    vectors = st_model.encode([QUERY, *documents], normalize_embeddings=True)
    similarity: np.ndarray = vectors[1:] @ vectors[0]
    return similarity


def test_client_v2_reranks_a_chunk_longer_than_the_model(server_url: str, st_model: Any) -> None:
    client = cohere.ClientV2(base_url=server_url, api_key="unused", timeout=120)
    assert len(st_model.tokenizer(CHUNK)["input_ids"]) > 500
    cut = cut_by_hand(st_model, CHUNK)
    expected = expected_scores(st_model, [SHORT, cut])
    by_hand = client.rerank(model=MODEL_ID, query=QUERY, documents=[SHORT, cut])
    for extra in ({}, {"max_tokens_per_doc": 4096}, {"max_tokens_per_doc": 256}):
        response = client.rerank(model=MODEL_ID, query=QUERY, documents=[SHORT, CHUNK], **extra)
        got = {result.index: result.relevance_score for result in response.results}
        assert got == {result.index: result.relevance_score for result in by_hand.results}
        np.testing.assert_allclose([got[0], got[1]], expected, atol=1e-5)


def test_langchains_cohere_rerank_reranks_a_long_chunk(server_url: str, st_model: Any) -> None:
    from langchain_cohere import CohereRerank
    from langchain_core.documents import Document

    client = cohere.ClientV2(base_url=server_url, api_key="unused", timeout=120)
    reranker = CohereRerank(client=client, model=MODEL_ID, top_n=2)
    ranked = reranker.compress_documents(
        [Document(page_content=SHORT), Document(page_content=CHUNK)], QUERY
    )
    expected = expected_scores(st_model, [SHORT, cut_by_hand(st_model, CHUNK)])
    scores = {doc.page_content: doc.metadata["relevance_score"] for doc in ranked}
    np.testing.assert_allclose([scores[SHORT], scores[CHUNK]], expected, atol=1e-5)
