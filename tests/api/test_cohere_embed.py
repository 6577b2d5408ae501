"""Cohere's embed API in process: every embedding type against an independent reference
(sentence-transformers' vectors and `quantize_embeddings`, float64 int8 scaling), retrieval
order kept by the compact types, `input_type` mapped to the model's prompts, truncation."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from poolserve import Engine
from tests.api.helpers import assert_openai_error, load_engine, post_ok, serving
from tests.reference import FP32_COSINE, WORDS, assert_close_vectors
from tests.tiny_models import make_prompted_embedding

pytestmark = pytest.mark.anyio

ALL_TYPES = ["float", "int8", "uint8", "binary", "ubinary", "base64"]
# Four topics, three documents each, and a query for each topic.
DOCUMENTS = [
    "Bake the bread at 220 degrees until the crust is golden.",
    "Knead the dough for ten minutes, then let it rise.",
    "Sourdough needs a starter of flour and water.",
    "The striker scored twice in the second half.",
    "The goalkeeper saved a penalty in the final minute.",
    "The team won the league after a long season.",
    "The telescope found a planet orbiting a distant star.",
    "Astronauts repaired the space station's solar panel.",
    "The rocket launched its satellite into orbit.",
    "The court ruled that the contract was void.",
    "The lawyer appealed the verdict to a higher court.",
    "The judge sentenced him to two years in prison.",
]
QUERIES = ["how do I make bread", "who won the football match", "news about space", "legal case"]


@pytest.fixture
async def client(engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    async with serving(engine) as http:
        yield http


def int8_reference(vectors: np.ndarray) -> np.ndarray:
    """The documented scaling, in float64: round(127 v / max|v|)."""
    v = vectors.astype(np.float64)
    return np.rint(127 * v / np.abs(v).max(axis=1, keepdims=True))


async def test_every_type_against_its_reference(client: httpx.AsyncClient, st_model: Any) -> None:
    from sentence_transformers.util.quantization import quantize_embeddings

    body = await post_ok(client, "/v2/embed", {"texts": DOCUMENTS, "embedding_types": ALL_TYPES})
    embeddings = body["embeddings"]
    assert sorted(embeddings) == sorted(ALL_TYPES)
    floats = np.array(embeddings["float"], dtype=np.float32)
    assert_close_vectors(floats, st_model.encode(DOCUMENTS), FP32_COSINE, DOCUMENTS)
    int8 = np.array(embeddings["int8"])
    assert int8.shape == floats.shape and int8.min() >= -127 and int8.max() <= 127
    assert np.abs(int8 - int8_reference(floats)).max() <= 1  # a rounding tie, at most
    assert (np.abs(int8).max(axis=1) == 127).all()
    np.testing.assert_array_equal(np.array(embeddings["uint8"]), int8 + 128)
    for kind in ("binary", "ubinary"):
        expected = quantize_embeddings(floats, precision=kind)
        np.testing.assert_array_equal(np.array(embeddings[kind]), expected)
        assert len(embeddings[kind][0]) == floats.shape[1] // 8
    decoded = [np.frombuffer(base64.b64decode(row), "<f4") for row in embeddings["base64"]]
    np.testing.assert_array_equal(np.stack(decoded), floats)
    assert body["texts"] == DOCUMENTS
    assert body["response_type"] == "embeddings_by_type"
    assert body["meta"]["api_version"] == {"version": "2"}
    tokens = sum(len(st_model.tokenizer(text)["input_ids"]) for text in DOCUMENTS)
    assert body["meta"]["billed_units"] == {"input_tokens": tokens}


async def test_compact_types_keep_the_retrieval_order(client: httpx.AsyncClient) -> None:
    types = {"embedding_types": ["float", "int8", "ubinary"]}
    documents = (await post_ok(client, "/v2/embed", {"texts": DOCUMENTS, **types}))["embeddings"]
    queries = (await post_ok(client, "/v2/embed", {"texts": QUERIES, **types}))["embeddings"]
    by_float = np.array(queries["float"]) @ np.array(documents["float"]).T
    # Each int8 vector has its own scale: compare them by cosine, as docs/apis.md says.
    int8_q, int8_d = (np.array(side["int8"], np.float64) for side in (queries, documents))
    by_int8 = (int8_q / np.linalg.norm(int8_q, axis=1, keepdims=True)) @ (
        int8_d / np.linalg.norm(int8_d, axis=1, keepdims=True)
    ).T
    bits_q = np.unpackbits(np.array(queries["ubinary"], np.uint8), axis=1)
    bits_d = np.unpackbits(np.array(documents["ubinary"], np.uint8), axis=1)
    hamming = (bits_q[:, None, :] != bits_d[None, :, :]).sum(axis=2)
    for query in range(len(QUERIES)):
        topic = set(range(query * 3, query * 3 + 3))
        assert set(np.argsort(-by_float[query])[:3]) == topic  # the corpus is well separated
        best = np.argmax(by_float[query])
        assert np.argmax(by_int8[query]) == best
        assert set(np.argsort(-by_int8[query])[:3]) == topic
        assert set(np.argsort(hamming[query], kind="stable")[:3]) == topic
        np.testing.assert_allclose(by_int8[query], by_float[query], atol=0.02)


async def test_v1_answers_floats_unless_types_are_asked_for(
    client: httpx.AsyncClient, st_model: Any
) -> None:
    plain = await post_ok(client, "/v1/embed", {"texts": DOCUMENTS[:2]})
    assert plain["response_type"] == "embeddings_floats"
    assert_close_vectors(plain["embeddings"], st_model.encode(DOCUMENTS[:2]))
    typed = await post_ok(
        client, "/v1/embed", {"texts": DOCUMENTS[:2], "embedding_types": ["int8"]}
    )
    assert typed["response_type"] == "embeddings_by_type"
    assert list(typed["embeddings"]) == ["int8"]


async def test_output_dimension_slices_before_quantizing(client: httpx.AsyncClient) -> None:
    body = await post_ok(
        client,
        "/v2/embed",
        {"texts": ["a"], "output_dimension": 64, "embedding_types": ["float", "ubinary"]},
    )
    assert len(body["embeddings"]["float"][0]) == 64
    assert len(body["embeddings"]["ubinary"][0]) == 8
    np.testing.assert_allclose(np.linalg.norm(body["embeddings"]["float"][0]), 1.0, atol=1e-5)


async def test_truncate_none_start_and_end(client: httpx.AsyncClient) -> None:
    long_text = " ".join(WORDS * 20)
    refused = await client.post("/v2/embed", json={"texts": [long_text], "truncate": "NONE"})
    error = assert_openai_error(refused, 400)
    assert error["message"].startswith("texts[0] has") and "at most 256" in error["message"]
    assert '`truncate: "END"`' in error["message"] and error["param"] == "texts"
    assert "truncate_prompt_tokens" not in error["message"]
    for truncate, side in (("END", "right"), ("START", "left")):
        cut = await post_ok(
            client, "/v2/embed", {"texts": [long_text], "truncate": truncate, "max_tokens": 30}
        )
        same = await post_ok(
            client,
            "/v1/embeddings",
            {"input": [long_text], "truncate_prompt_tokens": 30, "truncation_side": side},
        )
        assert_close_vectors(cut["embeddings"]["float"], [same["data"][0]["embedding"]])
        assert cut["meta"]["billed_units"]["input_tokens"] == 30
    both = await client.post(
        "/v2/embed", json={"texts": ["a"], "truncate": "NONE", "max_tokens": 5}
    )
    assert assert_openai_error(both, 400)["param"] == "max_tokens"


@pytest.mark.parametrize(
    "body",
    [
        {"texts": []},
        {"texts": ["a"], "embedding_types": ["int4"]},
        {"texts": ["a"], "input_type": "image"},
        {"texts": ["a"], "images": ["data:image/png;base64,AAAA"]},
        {"texts": ["  "]},
    ],
)
async def test_what_cannot_be_served_is_400(client: httpx.AsyncClient, body: Any) -> None:
    assert_openai_error(await client.post("/v2/embed", json=body), 400)


async def test_input_type_picks_the_models_prompt(tmp_path: Path) -> None:
    from sentence_transformers import SentenceTransformer

    directory = make_prompted_embedding(tmp_path / "model")
    reference = SentenceTransformer(str(directory), device="cpu")
    cases = {
        "search_query": {"prompt_name": "query"},
        "search_document": {"prompt_name": "document"},
        "classification": {},  # no such prompt: the default one ("document")
    }
    with load_engine(directory) as engine:
        async with serving(engine) as http:
            for input_type, options in cases.items():
                body = await post_ok(
                    http, "/v2/embed", {"texts": QUERIES, "input_type": input_type}
                )
                expected = reference.encode(QUERIES, **options)
                assert_close_vectors(body["embeddings"]["float"], expected, FP32_COSINE)
            # Voyage AI's input types pick the same prompts (its shape of /v1/embeddings).
            for input_type, prompt_name in (("query", "query"), ("document", "document")):
                body = await post_ok(
                    http, "/v1/embeddings", {"input": QUERIES, "input_type": input_type}
                )
                expected = reference.encode(QUERIES, prompt_name=prompt_name)
                got = [item["embedding"] for item in body["data"]]
                assert_close_vectors(got, expected, FP32_COSINE)
