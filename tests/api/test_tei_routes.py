"""text-embeddings-inference's routes in process, each against sentence-transformers, the
HF tokenizer, or its poolserve twin; TEI's shapes on /rerank and /tokenize chosen by the body;
TEI's error shape on TEI routes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from poolserve import Engine
from poolserve.errors import InvalidRequestError, SettingError
from tests.api.helpers import assert_openai_error, load_engine, post_ok, serving
from tests.reference import FP32_COSINE, WORDS, assert_close_vectors

pytestmark = pytest.mark.anyio

TEXTS = ["The quick brown fox", "Serving embeddings well, naïvely", "x"]
DOCUMENTS = ["Bread is baked from dough.", "The striker scored.", "Yeast makes dough rise."]


@pytest.fixture
async def client(engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    async with serving(engine) as http:
        yield http


def assert_tei_error(response: httpx.Response, status: int, error_type: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "error_type"}
    assert body["error_type"] == error_type
    message: str = body["error"]
    return message


async def test_embed(client: httpx.AsyncClient, st_model: Any) -> None:
    one = await post_ok(client, "/embed", {"inputs": TEXTS[0]})
    assert np.array(one).shape == (1, 384)
    several = await post_ok(client, "/embed", {"inputs": TEXTS})
    assert_close_vectors(several, st_model.encode(TEXTS), FP32_COSINE, TEXTS)
    raw = np.array(await post_ok(client, "/embed", {"inputs": TEXTS, "normalize": False}))
    assert not np.allclose(np.linalg.norm(raw, axis=1), 1.0)
    assert_close_vectors(raw, st_model.encode(TEXTS), FP32_COSINE)  # same direction
    short = await post_ok(client, "/embed", {"inputs": TEXTS, "dimensions": 32})
    assert np.array(short).shape == (3, 32)


async def test_embed_truncation(client: httpx.AsyncClient) -> None:
    long_text = " ".join(WORDS * 20)
    refused = await client.post("/embed", json={"inputs": ["short", long_text]})
    message = assert_tei_error(refused, 400, "Validation")
    # In TEI's words: its field and its way to cut, not vLLM's.
    assert message.startswith("inputs[1] has") and "at most 256" in message, message
    assert "pass `truncate: true` to cut it" in message and "truncate_prompt_tokens" not in message
    for direction, side in (("Right", "right"), ("Left", "left")):
        cut = await post_ok(
            client,
            "/embed",
            {"inputs": long_text, "truncate": True, "truncation_direction": direction},
        )
        same = await post_ok(
            client,
            "/v1/embeddings",
            {"input": long_text, "truncate_prompt_tokens": -1, "truncation_side": side},
        )
        assert_close_vectors(cut, [same["data"][0]["embedding"]])


async def test_embed_all_is_the_token_vectors(client: httpx.AsyncClient, engine: Engine) -> None:
    body = await post_ok(client, "/embed_all", {"inputs": TEXTS[:2]})
    pooled = await post_ok(
        client, "/pooling", {"input": TEXTS[:2], "task": "token_embed", "normalize": False}
    )
    for tokens, expected, text in zip(body, pooled["data"], TEXTS, strict=False):
        assert len(tokens) == len(engine.tokenize(text))
        np.testing.assert_allclose(tokens, expected["data"], rtol=1e-5, atol=1e-6)


async def test_similarity(client: httpx.AsyncClient, st_model: Any) -> None:
    from sentence_transformers.util import cos_sim

    inputs = {"source_sentence": "how to bake bread", "sentences": DOCUMENTS}
    scores = await post_ok(client, "/similarity", {"inputs": inputs})
    expected = cos_sim(st_model.encode(["how to bake bread"]), st_model.encode(DOCUMENTS))[0]
    np.testing.assert_allclose(scores, expected.numpy(), atol=1e-5)


async def test_errors_name_the_input_as_tei_does(client: httpx.AsyncClient) -> None:
    """The query or source sentence is not counted among the texts or sentences."""
    long_text = " ".join(WORDS * 20)
    cases = [
        ("/rerank", {"query": "q", "texts": ["a", "  "]}, "texts[1] is only whitespace"),
        ("/rerank", {"query": "q", "texts": ["a", long_text], "truncate": False}, "texts[1] has"),
        ("/rerank", {"query": long_text, "texts": ["a"], "truncate": False}, "query has"),
        (
            "/similarity",
            {"inputs": {"source_sentence": "q", "sentences": ["a", long_text]}},
            "sentences[1] has",
        ),
        (
            "/similarity",
            {"inputs": {"source_sentence": " ", "sentences": ["a"]}},
            "source_sentence is only whitespace",
        ),
    ]
    for path, body, start in cases:
        message = assert_tei_error(await client.post(path, json=body), 400, "Validation")
        assert message.startswith(start), (body, message)


async def test_text_classification_on_an_embedder_says_what_the_model_is(
    client: httpx.AsyncClient,
) -> None:
    """`InferenceClient.text_classification` posts `parameters` to POST /: not an unknown
    field, but a model that cannot classify."""
    body = {"inputs": "I like you", "parameters": {"function_to_apply": "sigmoid", "top_k": 1}}
    message = assert_tei_error(await client.post("/", json=body), 400, "Validation")
    assert "asks for text classification, and this model is an embedding model" in message


async def test_a_long_text_on_teis_rerank_is_cut_beside_the_query(
    client: httpx.AsyncClient, st_model: Any
) -> None:
    long_text = " ".join(WORDS * 20)
    answer = await post_ok(client, "/rerank", {"query": "baking", "texts": ["bread", long_text]})
    ids = st_model.tokenizer(long_text, add_special_tokens=False, return_offsets_mapping=True)
    cut = long_text[: ids["offset_mapping"][253][1]]  # 254 tokens and [CLS], [SEP]: 256
    vectors = st_model.encode(["baking", "bread", cut], normalize_embeddings=True)
    expected = vectors[1:] @ vectors[0]
    scores = [item["score"] for item in sorted(answer, key=lambda item: item["index"])]
    np.testing.assert_allclose(scores, expected, atol=1e-5)


async def test_info(client: httpx.AsyncClient, engine: Engine) -> None:
    info = (await client.get("/info")).json()
    assert info["model_type"] == {"embedding": {"pooling": "mean"}}
    assert info["max_input_length"] == engine.max_model_len == 256
    assert info["model_dtype"] == "float32"
    assert info["precision"] is None  # asked for, not measured


async def test_rerank_in_teis_shape(client: httpx.AsyncClient) -> None:
    tei = await post_ok(
        client, "/rerank", {"query": "baking", "texts": DOCUMENTS, "return_text": True}
    )
    ours = await post_ok(client, "/rerank", {"query": "baking", "documents": DOCUMENTS})
    assert [item["index"] for item in tei] == [item["index"] for item in ours["results"]]
    np.testing.assert_allclose(  # batch composition moves the last float bits
        [item["score"] for item in tei],
        [item["relevance_score"] for item in ours["results"]],
        atol=1e-5,
    )
    assert [item["text"] for item in tei] == [DOCUMENTS[item["index"]] for item in tei]
    unknown = await client.post("/rerank", json={"query": "q", "texts": ["a"], "top_n": 1})
    assert "unknown field `top_n`" in assert_tei_error(unknown, 400, "Validation")


async def test_tokenize_in_teis_shape(client: httpx.AsyncClient, hf_tokenizer: Any) -> None:
    body = await post_ok(client, "/tokenize", {"inputs": TEXTS[1]})
    encoding = hf_tokenizer(TEXTS[1], return_offsets_mapping=True)
    assert [token["id"] for token in body[0]] == encoding["input_ids"]
    first, *middle, last = body[0]
    assert first == {"id": 101, "text": "[CLS]", "special": True, "start": None, "stop": None}
    assert last["special"] and last["text"] == "[SEP]"
    for token, (start, stop) in zip(middle, encoding["offset_mapping"][1:-1], strict=True):
        assert (token["start"], token["stop"], token["special"]) == (start, stop, False)
        assert token["text"] == TEXTS[1][start:stop]
    vllm = await post_ok(client, "/tokenize", {"prompt": TEXTS[1]})
    assert vllm["tokens"] == encoding["input_ids"]


async def test_inference_api_route_on_an_embedding_model(
    client: httpx.AsyncClient, st_model: Any
) -> None:
    vectors = await post_ok(client, "/", {"inputs": TEXTS})
    assert_close_vectors(vectors, st_model.encode(TEXTS))
    scores = await post_ok(
        client,
        "/",
        {"inputs": {"source_sentence": "bake", "sentences": DOCUMENTS}, "parameters": {}},
    )
    assert len(scores) == len(DOCUMENTS)


@pytest.fixture
async def classifier(classifier_dir: Path) -> AsyncIterator[httpx.AsyncClient]:
    with load_engine(classifier_dir) as engine:
        async with serving(engine) as http:
            yield http


async def test_predict_on_a_classifier(classifier: httpx.AsyncClient) -> None:
    ours = await post_ok(classifier, "/classify", {"input": TEXTS})
    batch = await post_ok(classifier, "/predict", {"inputs": TEXTS})
    single = await post_ok(classifier, "/predict", {"inputs": TEXTS[0]})
    assert [p["label"] for p in single] == [p["label"] for p in batch[0]]
    assert [p["score"] for p in single] == pytest.approx([p["score"] for p in batch[0]])
    for predictions, item in zip(batch, ours["data"], strict=True):
        probs = np.array(item["probs"])
        assert [p["score"] for p in predictions] == pytest.approx(sorted(probs, reverse=True))
        assert predictions[0]["label"] == item["label"]
    raw = await post_ok(classifier, "/predict", {"inputs": TEXTS[0], "raw_scores": True})
    assert sum(p["score"] for p in raw) != pytest.approx(1.0)
    nested = await post_ok(classifier, "/", {"inputs": TEXTS[0], "parameters": {"top_k": 1}})
    assert len(nested) == 1 and len(nested[0]) == 1  # the Inference API's: a list per input
    assert nested[0][0]["label"] == single[0]["label"]


async def test_predict_takes_only_the_models_own_function_to_apply(
    classifier: httpx.AsyncClient,
) -> None:
    """The tiny classifier's scores are a softmax: asking for it is the default answer, asking
    for a sigmoid is refused (it was accepted and ignored), "none" gives the raw logits."""
    default = await post_ok(classifier, "/predict", {"inputs": TEXTS[0]})
    softmax = await post_ok(
        classifier, "/", {"inputs": TEXTS[0], "parameters": {"function_to_apply": "softmax"}}
    )
    assert [p["score"] for p in softmax[0]] == pytest.approx([p["score"] for p in default])
    refused = await classifier.post(
        "/", json={"inputs": TEXTS[0], "parameters": {"function_to_apply": "sigmoid"}}
    )
    assert "come through softmax, not sigmoid" in assert_tei_error(refused, 400, "Validation")
    stringly = await classifier.post("/predict", json={"inputs": "x", "request_timeout": "1"})
    assert_tei_error(stringly, 400, "Validation")


async def test_predict_with_no_inputs_is_a_400_in_teis_shape(
    classifier: httpx.AsyncClient, classifier_dir: Path
) -> None:
    for route in ("/predict", "/"):
        response = await classifier.post(route, json={"inputs": []})
        assert "inputs is empty" in assert_tei_error(response, 400, "Validation")
    # The server still answers; the Python API refuses no inputs at once.
    assert len(await post_ok(classifier, "/predict", {"inputs": TEXTS[:1]})) == 1
    with load_engine(classifier_dir) as engine, pytest.raises(InvalidRequestError, match="empty"):
        engine.classify([])


async def test_predict_pairs_on_a_cross_encoder(cross_encoder_dir: Path) -> None:
    pairs = [["what is bread", DOCUMENTS[0]], ["what is bread", DOCUMENTS[1]]]
    with load_engine(cross_encoder_dir) as engine:
        async with serving(engine) as http:
            predicted = await post_ok(http, "/predict", {"inputs": pairs})
            scored = await post_ok(
                http, "/score", {"queries": "what is bread", "documents": DOCUMENTS[:2]}
            )
    assert [p[0]["score"] for p in predicted] == pytest.approx(
        [item["score"] for item in scored["data"]]
    )


async def test_an_llm_reranker_is_a_reranker_and_its_length_errors_name_what_to_change(
    tmp_path: Path,
) -> None:
    """A Qwen3-Reranker served as a cross-encoder (no classifier head: its score is the LLM's
    yes/no answer) is what TEI's clients call a reranker, not an embedding model. A pair too
    long for its prompt names what to change: a `truncate_prompt_tokens` below the template's
    own length (the client's number to raise, not the model's limit), a query that fills the
    prompt before any document (by the field the body used), or the document."""
    from poolserve import ModelConfig
    from tests.model_zoo import make_qwen3_reranker_0_6b

    directory = make_qwen3_reranker_0_6b(tmp_path / "qwen3-reranker")
    config = ModelConfig(
        model=str(directory), task="cross_encoder", dtype="float32", max_model_len=160
    )
    long_query, long_document = "cat " * 70, "a cat is an animal " * 40
    refusals = [
        # The client's cap below the template's own ~106 tokens: the cap is what to raise.
        ("/rerank", {"query": "cat", "documents": ["d"], "truncate_prompt_tokens": 50}),
        # A query that fills the model's room before any document: the query, by its field.
        ("/rerank", {"query": long_query, "documents": ["d"]}),
        ("/score", {"queries": [long_query], "documents": ["d"]}),
        ("/score", {"text_1": long_query, "text_2": ["d"]}),
        ("/score", {"text_1": "cat", "text_2": ["d", long_document]}),
    ]
    with Engine(model_config=config) as engine:
        async with serving(engine) as client:
            info = (await client.get("/info")).json()
            errors = [
                assert_openai_error(await client.post(path, json=body), 400)
                for path, body in refusals
            ]
            cut = {"query": "cat", "documents": ["d", long_document]}
            assert len((await post_ok(client, "/rerank", cut))["results"]) == 2
    assert info["model_type"] == {
        "reranker": {"id2label": {"0": "score"}, "label2id": {"score": 0}}
    }
    assert [error["param"] for error in errors] == [
        "truncate_prompt_tokens",
        "query",
        "queries",
        "text_1",
        "text_2",
    ]
    assert "raise it (at most the model's 160" in errors[0]["message"], errors[0]
    assert errors[3]["message"].startswith("text_1[0] takes"), errors[3]
    assert errors[4]["message"].startswith("pair 1 "), errors[4]
    # A length the template alone fills refuses to start, in one line.
    with pytest.raises(SettingError, match="max_model_len=64 leaves no room"):
        Engine(model_config=replace(config, max_model_len=64))
