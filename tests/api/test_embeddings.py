"""POST /v1/embeddings in-process: vectors vs sentence-transformers, options, usage, headers."""

from __future__ import annotations

import base64
from typing import Any

import httpx
import numpy as np
import pytest
from asgi_lifespan import LifespanManager

from poolserve import ServerConfig
from poolserve.app import create_app
from tests.api.helpers import assert_openai_error, embed, vectors
from tests.reference import (
    DIM,
    FP32_COSINE,
    MAX_LEN,
    MODEL_ID,
    Corpus,
    assert_close_vectors,
    norms,
    st_encode,
    text_with_tokens,
    token_ids,
)

pytestmark = pytest.mark.anyio


async def test_every_corpus_input_matches_sentence_transformers(
    client: httpx.AsyncClient, corpus: Corpus
) -> None:
    body = await embed(client, input=corpus.within, model=MODEL_ID)
    assert body["object"] == "list"
    assert body["model"] == MODEL_ID
    assert all(item["object"] == "embedding" for item in body["data"])
    actual = vectors(body)
    assert actual.shape == (len(corpus.within), DIM)
    assert_close_vectors(actual, corpus.ref_within, FP32_COSINE, corpus.within)
    np.testing.assert_allclose(norms(actual), 1.0, atol=1e-5)
    assert body["usage"] == {
        "prompt_tokens": sum(corpus.within_tokens),
        "total_tokens": sum(corpus.within_tokens),
    }


async def test_inputs_over_the_limit_with_truncation_minus_one(
    client: httpx.AsyncClient, corpus: Corpus
) -> None:
    body = await embed(client, input=corpus.over, truncate_prompt_tokens=-1)
    assert_close_vectors(vectors(body), corpus.ref_over, FP32_COSINE, corpus.over)
    assert body["usage"]["prompt_tokens"] == MAX_LEN * len(corpus.over)


async def test_a_single_string_input(client: httpx.AsyncClient, st_model: Any) -> None:
    body = await embed(client, input="a lone string")
    assert len(body["data"]) == 1
    assert_close_vectors(vectors(body), st_encode(st_model, ["a lone string"]))


async def test_base64_carries_the_same_float32_vectors(
    client: httpx.AsyncClient, corpus: Corpus
) -> None:
    # One text per request: a batch of one runs the same way every time, while a larger one may
    # be split between runners or lent their cores, which changes the last bits of the floats.
    texts = corpus.within[:30]
    as_float = np.concatenate(
        [vectors(await embed(client, input=[text], encoding_format="float")) for text in texts]
    )
    bodies = [await embed(client, input=[text], encoding_format="base64") for text in texts]
    decoded = np.stack(
        [
            np.frombuffer(base64.b64decode(body["data"][0]["embedding"]), dtype="<f4")
            for body in bodies
        ]
    )
    assert decoded.shape == (30, DIM)
    np.testing.assert_array_equal(decoded, as_float)


@pytest.mark.parametrize("n", [2, 3, 16, 100, 255, 256])
async def test_truncate_prompt_tokens_cuts_to_exactly_n(
    client: httpx.AsyncClient, st_model: Any, hf_tokenizer: Any, n: int
) -> None:
    text = text_with_tokens(hf_tokenizer, 600, seed=n)
    body = await embed(client, input=[text], truncate_prompt_tokens=n)
    assert body["usage"]["prompt_tokens"] == n
    assert_close_vectors(vectors(body), st_encode(st_model, [text], max_length=n))


async def test_truncate_minus_one_means_the_model_maximum(
    client: httpx.AsyncClient, st_model: Any, hf_tokenizer: Any
) -> None:
    text = text_with_tokens(hf_tokenizer, 1000, seed=11)
    body = await embed(client, input=text, truncate_prompt_tokens=-1)
    assert body["usage"]["prompt_tokens"] == MAX_LEN
    assert_close_vectors(vectors(body), st_encode(st_model, [text], max_length=MAX_LEN))


async def test_truncation_leaves_short_inputs_alone(
    client: httpx.AsyncClient, hf_tokenizer: Any, st_model: Any
) -> None:
    texts = ["short one", "a second short sentence"]
    body = await embed(client, input=texts, truncate_prompt_tokens=100)
    expected_tokens = sum(len(token_ids(hf_tokenizer, text)) for text in texts)
    assert body["usage"]["prompt_tokens"] == expected_tokens
    assert_close_vectors(vectors(body), st_encode(st_model, texts))


async def test_token_id_inputs_give_the_vectors_of_their_texts(
    client: httpx.AsyncClient, corpus: Corpus
) -> None:
    texts = [corpus.within[0], corpus.within[40], corpus.within[-1]]
    ids = []
    for text in texts:
        response = await client.post("/tokenize", json={"prompt": text})
        assert response.status_code == 200
        ids.append(response.json()["tokens"])
    from_texts = vectors(await embed(client, input=texts))

    single = await embed(client, input=ids[0])  # list[int]: one input
    assert len(single["data"]) == 1
    assert single["usage"]["prompt_tokens"] == len(ids[0])
    assert_close_vectors(vectors(single), from_texts[:1])

    several = await embed(client, input=ids)  # list[list[int]]
    assert several["usage"]["prompt_tokens"] == sum(len(i) for i in ids)
    assert_close_vectors(vectors(several), from_texts)
    indices = [corpus.within.index(text) for text in texts]
    assert_close_vectors(vectors(several), corpus.ref_within[indices])


@pytest.mark.parametrize("option", ["normalize", "use_activation"])
async def test_unnormalized_output_matches_the_raw_reference(
    client: httpx.AsyncClient, st_model: Any, corpus: Corpus, option: str
) -> None:
    texts = corpus.within[:25]
    actual = vectors(await embed(client, input=texts, **{option: False}))
    expected = st_encode(st_model, texts, normalize=False)
    assert np.all(np.abs(norms(actual) - 1.0) > 1e-2), "vectors came back normalized"
    assert_close_vectors(actual, expected, FP32_COSINE, texts)
    np.testing.assert_allclose(norms(actual), norms(expected), rtol=1e-4)


@pytest.mark.parametrize("option", ["normalize", "use_activation"])
async def test_explicit_true_normalizes(
    client: httpx.AsyncClient, corpus: Corpus, option: str
) -> None:
    actual = vectors(await embed(client, input=corpus.within[:10], **{option: True}))
    np.testing.assert_allclose(norms(actual), 1.0, atol=1e-5)
    assert_close_vectors(actual, corpus.ref_within[:10])


@pytest.mark.parametrize("dimensions", [1, 128, 383, 384])
async def test_dimensions_slice_the_reference_and_renormalize(
    client: httpx.AsyncClient, corpus: Corpus, dimensions: int
) -> None:
    actual = vectors(await embed(client, input=corpus.within[:20], dimensions=dimensions))
    expected = corpus.ref_within[:20, :dimensions]
    expected = expected / np.linalg.norm(expected, axis=1, keepdims=True)
    assert actual.shape == (20, dimensions)
    np.testing.assert_allclose(norms(actual), 1.0, atol=1e-5)
    if dimensions > 1:
        assert_close_vectors(actual, expected)
    else:
        np.testing.assert_array_equal(np.sign(actual), np.sign(expected))


async def test_dimensions_without_normalization_are_a_raw_slice(
    client: httpx.AsyncClient, st_model: Any
) -> None:
    texts = ["slice me", "and me too"]
    actual = vectors(await embed(client, input=texts, dimensions=64, normalize=False))
    expected = st_encode(st_model, texts, normalize=False)[:, :64]
    np.testing.assert_allclose(actual, expected, rtol=1e-3, atol=1e-4)


async def test_timing_headers_and_request_id(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/v1/embeddings", json={"input": "timed"}, headers={"x-request-id": "client-id-42"}
    )
    assert response.status_code == 200
    assert response.headers["x-request-id"] == "client-id-42"
    timings = {
        name: float(response.headers[name])
        for name in ("x-queue-time", "x-inference-time", "x-total-time")
    }
    assert all(value >= 0 for value in timings.values())
    assert timings["x-inference-time"] > 0
    assert timings["x-total-time"] >= timings["x-inference-time"]

    first = await client.post("/v1/embeddings", json={"input": "a"})
    second = await client.post("/v1/embeddings", json={"input": "b"})
    assert first.headers["x-request-id"]
    assert first.headers["x-request-id"] != second.headers["x-request-id"]


async def test_served_model_names(engine: Any) -> None:
    app = create_app(engine.service, ServerConfig(served_model_name=("my-embedder", "alias")))
    transport = httpx.ASGITransport(app=app)
    async with (
        LifespanManager(app),
        httpx.AsyncClient(transport=transport, base_url="http://t") as client,
    ):
        body = await embed(client, input="x", model="alias")
        assert body["model"] == "my-embedder"  # responses carry the first name
        models = (await client.get("/v1/models")).json()
        assert [m["id"] for m in models["data"]] == ["my-embedder", "alias"]
        response = await client.post("/v1/embeddings", json={"input": "x", "model": MODEL_ID})
        assert response.status_code == 404
        assert "my-embedder" in response.json()["error"]["message"]


async def test_fields_other_clients_send_are_accepted_and_ignored(
    client: httpx.AsyncClient,
) -> None:
    plain = await embed(client, input=["x"])
    body = await embed(client, input=["x"], user="someone", priority=5, request_id="r-1")
    assert body["data"] == plain["data"]


@pytest.mark.parametrize(
    ("path", "body", "unknown", "nearest"),
    [
        ("/v1/embeddings", {"input": "hello", "dimension": 8}, "dimension", "dimensions"),
        ("/v1/embeddings", {"input": "hello", "normalise": False}, "normalise", "normalize"),
        ("/pooling", {"input": "hello", "dimensions": 8}, "dimensions", None),
        ("/rerank", {"query": "q", "documents": ["d"], "topn": 1}, "topn", "top_n"),
        ("/score", {"queries": "q", "documents": "d", "text3": "x"}, "text3", "text_2"),
        ("/tokenize", {"prompt": "q", "add_special_token": False}, "add_special_token", None),
    ],
)
async def test_an_unknown_field_is_a_400_naming_the_nearest_known_one(
    client: httpx.AsyncClient, path: str, body: dict[str, Any], unknown: str, nearest: str | None
) -> None:
    """A typo must not silently change the answer (`dimension` would return all 384 values)."""
    error = assert_openai_error(await client.post(path, json=body), 400)
    assert error["param"] == unknown
    assert error["message"].startswith(f"unknown field `{unknown}`"), error
    if nearest is not None:
        assert f"did you mean `{nearest}`?" in error["message"], error
    assert "this route takes: " in error["message"]
