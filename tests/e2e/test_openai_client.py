"""The official `openai` client against a real server: base64 (its default), float, dimensions."""

from __future__ import annotations

from typing import Any

import numpy as np
import openai
import pytest

from tests.reference import (
    FP32_COSINE,
    MAX_LEN,
    MODEL_ID,
    Corpus,
    assert_close_vectors,
    norms,
)

pytestmark = pytest.mark.slow  # a real server process


@pytest.fixture(scope="module")
def client(server_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server_url}/v1", api_key="x", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def sample(corpus: Corpus) -> tuple[list[str], np.ndarray]:
    """Every kind of input: short, unicode, whitespace, punctuation, long, exactly 256 tokens."""
    indices = [*range(0, len(corpus.within), 7), corpus.within_tokens.index(MAX_LEN)]
    return [corpus.within[i] for i in indices], corpus.ref_within[indices]


def as_array(response: Any) -> np.ndarray:
    assert [item.index for item in response.data] == list(range(len(response.data)))
    return np.array([item.embedding for item in response.data], dtype=np.float32)


def test_default_encoding_is_base64_and_matches_the_reference(
    client: openai.OpenAI, sample: tuple[list[str], np.ndarray], corpus: Corpus
) -> None:
    texts, expected = sample
    response = client.embeddings.create(model=MODEL_ID, input=texts)
    assert response.model == MODEL_ID
    actual = as_array(response)
    assert_close_vectors(actual, expected, FP32_COSINE, texts)
    np.testing.assert_allclose(norms(actual), 1.0, atol=1e-5)
    counts = [corpus.within_tokens[corpus.within.index(text)] for text in texts]
    assert response.usage.prompt_tokens == sum(counts)


def test_float_encoding_gives_the_same_vectors(
    client: openai.OpenAI, sample: tuple[list[str], np.ndarray]
) -> None:
    texts, expected = sample
    as_float = as_array(
        client.embeddings.create(model=MODEL_ID, input=texts, encoding_format="float")
    )
    as_base64 = as_array(client.embeddings.create(model=MODEL_ID, input=texts))
    assert_close_vectors(as_float, expected, FP32_COSINE, texts)
    np.testing.assert_allclose(as_float, as_base64, rtol=0, atol=1e-7)


def test_dimensions_are_the_reference_sliced_and_renormalized(
    client: openai.OpenAI, sample: tuple[list[str], np.ndarray]
) -> None:
    texts, expected = sample
    # The client asks for base64 and decodes it when no format is given (an explicit "base64"
    # would hand back the raw strings).
    for options in ({}, {"encoding_format": "float"}):
        response = client.embeddings.create(model=MODEL_ID, input=texts, dimensions=128, **options)
        actual = as_array(response)
        assert actual.shape == (len(texts), 128)
        sliced = expected[:, :128] / np.linalg.norm(expected[:, :128], axis=1, keepdims=True)
        assert_close_vectors(actual, sliced, FP32_COSINE, texts)
        np.testing.assert_allclose(norms(actual), 1.0, atol=1e-5)


def test_a_single_string_and_token_ids(
    client: openai.OpenAI, hf_tokenizer: Any, sample: tuple[list[str], np.ndarray]
) -> None:
    texts, expected = sample
    single = as_array(client.embeddings.create(model=MODEL_ID, input=texts[1]))
    assert_close_vectors(single, expected[1:2])
    ids = [hf_tokenizer(text)["input_ids"] for text in texts[:3]]
    from_ids = as_array(client.embeddings.create(model=MODEL_ID, input=ids))
    assert_close_vectors(from_ids, expected[:3])


def test_client_errors_are_raised_as_openai_errors(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as bad:
        client.embeddings.create(model=MODEL_ID, input="")
    assert bad.value.status_code == 400
    assert "empty" in bad.value.message
    with pytest.raises(openai.NotFoundError) as missing:
        client.embeddings.create(model="text-embedding-3-small", input="x")
    assert MODEL_ID in missing.value.message
    with pytest.raises(openai.BadRequestError, match="384"):
        client.embeddings.create(model=MODEL_ID, input="x", dimensions=385)


def test_langchain_openai_embeddings(server_url: str, st_model: Any) -> None:
    """LangChain's OpenAIEmbeddings with a custom base URL (its token-length check off: that
    check tokenizes with tiktoken, which knows only OpenAI's models)."""
    from langchain_openai import OpenAIEmbeddings

    embeddings = OpenAIEmbeddings(
        model=MODEL_ID,
        base_url=f"{server_url}/v1",
        api_key="unused",  # type: ignore[arg-type]
        check_embedding_ctx_length=False,
        max_retries=0,
    )
    texts = ["The quick brown fox", "jumps over the lazy dog", "naïve café"]
    documents = embeddings.embed_documents(texts)
    query = embeddings.embed_query(texts[0])
    assert_close_vectors(np.array(documents), st_model.encode(texts), FP32_COSINE, texts)
    assert_close_vectors(np.array([query]), st_model.encode(texts[:1]), FP32_COSINE)
