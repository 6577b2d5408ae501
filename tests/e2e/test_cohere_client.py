"""Cohere's own SDK (`ClientV2(base_url=...)`, and the v1 `Client`) against a real server:
every embedding type it decodes, checked against sentence-transformers."""

from __future__ import annotations

import base64
from typing import Any

import cohere
import numpy as np
import pytest

from tests.reference import FP32_COSINE, MODEL_ID, assert_close_vectors

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
