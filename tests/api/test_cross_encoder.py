"""A cross-encoder over HTTP: /score and the rerank routes against sentence-transformers.

The tiny cross-encoder is served in both layouts rerankers come in (sentence-transformers 6.x and
4.x); every score is compared with `CrossEncoder.predict` on the same pairs (fp32, 1e-4 relative).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from poolserve import Engine
from tests.api.helpers import assert_openai_error, load_engine, post_ok, serving
from tests.tiny_models import cross_encoder_reference_scores

pytestmark = pytest.mark.anyio

RTOL = 1e-4
QUERIES = ["What is the capital of France?", "How do I bake bread?", "who wrote hamlet"]
DOCUMENTS = [
    "Paris is the capital of France.",
    "Mix flour, water, yeast and salt, then bake the dough for forty minutes.",
    "Hamlet is a tragedy written by William Shakespeare.",
    "Bananas are yellow.",
    "x",
]
# "word" is one token: query + this document is well over the tiny model's 512 tokens.
LONG_DOCUMENT = " ".join(["word"] * 600)
CUT = 4  # max_tokens_per_doc in the cut tests
LONG_CUT = " ".join(["word"] * CUT)
RERANK_PATHS = ["/rerank", "/v1/rerank", "/v2/rerank"]

Pair = tuple[str, str]


def cut_text(tokenizer: Any, text: str, tokens: int) -> str:
    """`text` up to the end of its `tokens`-th token, from the HF tokenizer's own offsets."""
    offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)[
        "offset_mapping"
    ]
    return text if len(offsets) <= tokens else text[: offsets[tokens - 1][1]]


class Reference:
    """CrossEncoder.predict's scores (sigmoid and raw) for every pair the tests send."""

    def __init__(self, directory: Path) -> None:
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(str(directory))
        self.cut = {doc: cut_text(self.tokenizer, doc, CUT) for doc in DOCUMENTS}
        # The most of LONG_DOCUMENT that fits beside QUERIES[0] in the model's 512 tokens: the
        # pair as the HF tokenizer truncates it (only the second text), read back as text.
        fitted = self.tokenizer(QUERIES[0], LONG_DOCUMENT, truncation="only_second", max_length=512)
        room = fitted["token_type_ids"].count(1) - 1  # the document's tokens, less its [SEP]
        self.fitted = cut_text(self.tokenizer, LONG_DOCUMENT, room)
        pairs = [(q, d) for q in QUERIES for d in [*DOCUMENTS, *self.cut.values()]]
        pairs += [(QUERIES[0], LONG_DOCUMENT), (QUERIES[0], LONG_CUT), (QUERIES[0], self.fitted)]
        scores = cross_encoder_reference_scores(directory, pairs)
        raw = cross_encoder_reference_scores(directory, pairs, raw=True)
        self.scores = dict(zip(pairs, scores.tolist(), strict=True))
        self.raw = dict(zip(pairs, raw.tolist(), strict=True))

    def __call__(self, pairs: list[Pair], *, raw: bool = False) -> np.ndarray:
        table = self.raw if raw else self.scores
        return np.array([table[pair] for pair in pairs], dtype=np.float64)

    def tokens(self, pairs: list[Pair]) -> int:
        return sum(len(self.tokenizer(q, d)["input_ids"]) for q, d in pairs)


@pytest.fixture(scope="module", params=["st6", "st4"])
def layout_dir(request: pytest.FixtureRequest) -> Path:
    name = "cross_encoder_dir" if request.param == "st6" else "cross_encoder_st4_dir"
    directory: Path = request.getfixturevalue(name)
    return directory


@pytest.fixture(scope="module")
def ce_engine(layout_dir: Path) -> Iterator[Engine]:
    with load_engine(layout_dir) as engine:
        yield engine


@pytest.fixture(scope="module")
def reference(layout_dir: Path) -> Reference:
    return Reference(layout_dir)


@pytest.fixture
async def client(ce_engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    async with serving(ce_engine) as http:
        yield http


def scores_of(body: dict[str, Any]) -> np.ndarray:
    assert body["object"] == "list"
    assert [item["index"] for item in body["data"]] == list(range(len(body["data"])))
    assert {item["object"] for item in body["data"]} == {"score"}
    return np.array([item["score"] for item in body["data"]], dtype=np.float64)


SCORE_CASES = {
    "1:1": ({"queries": QUERIES[0], "documents": DOCUMENTS[0]}, [(QUERIES[0], DOCUMENTS[0])]),
    "1:N": ({"queries": QUERIES[1], "documents": DOCUMENTS}, [(QUERIES[1], d) for d in DOCUMENTS]),
    "1:N list": (
        {"queries": [QUERIES[2]], "documents": DOCUMENTS},
        [(QUERIES[2], d) for d in DOCUMENTS],
    ),
    "N:N": (
        {"queries": QUERIES, "documents": DOCUMENTS[:3]},
        list(zip(QUERIES, DOCUMENTS[:3], strict=True)),
    ),
    "text_1/text_2 1:N": (
        {"text_1": QUERIES[0], "text_2": DOCUMENTS},
        [(QUERIES[0], d) for d in DOCUMENTS],
    ),
    "text_1/text_2 N:N": (
        {"text_1": QUERIES, "text_2": DOCUMENTS[2:]},
        list(zip(QUERIES, DOCUMENTS[2:], strict=True)),
    ),
}


@pytest.mark.parametrize("case", list(SCORE_CASES))
@pytest.mark.parametrize("path", ["/score", "/v1/score"])
async def test_score_equals_cross_encoder_predict(
    client: httpx.AsyncClient, reference: Reference, case: str, path: str
) -> None:
    body, pairs = SCORE_CASES[case]
    response = await post_ok(client, path, body)
    got = scores_of(response)
    np.testing.assert_allclose(got, reference(pairs), rtol=RTOL)
    assert ((got > 0) & (got < 1)).all()  # sigmoid
    assert response["usage"]["prompt_tokens"] == reference.tokens(pairs)
    assert response["usage"]["total_tokens"] == reference.tokens(pairs)


async def test_score_without_activation_returns_raw_logits(
    client: httpx.AsyncClient, reference: Reference
) -> None:
    pairs = [(QUERIES[0], d) for d in DOCUMENTS]
    body = {"queries": QUERIES[0], "documents": DOCUMENTS, "use_activation": False}
    got = scores_of(await post_ok(client, "/score", body))
    np.testing.assert_allclose(got, reference(pairs, raw=True), rtol=RTOL, atol=1e-6)
    np.testing.assert_allclose(1 / (1 + np.exp(-got)), reference(pairs), rtol=RTOL)


def check_rerank(
    body: dict[str, Any],
    query: str,
    documents: list[str],
    expected: np.ndarray,
    *,
    top_n: int | None = None,
    with_documents: bool = True,
) -> None:
    results = body["results"]
    order = np.argsort(-expected, kind="stable")
    assert len(set(expected.tolist())) == len(expected), "ties would make the order ambiguous"
    assert [r["index"] for r in results] == order[: top_n or len(documents)].tolist()
    got = np.array([r["relevance_score"] for r in results])
    assert (np.diff(got) <= 0).all(), "not sorted by relevance_score, descending"
    np.testing.assert_allclose(got, expected[[r["index"] for r in results]], rtol=RTOL)
    for result in results:
        if with_documents:
            assert result["document"] == {"text": documents[result["index"]]}
        else:
            assert "document" not in result
        assert set(result) <= {"index", "relevance_score", "document"}


@pytest.mark.parametrize("path", RERANK_PATHS)
async def test_rerank_sorts_documents_by_score(
    client: httpx.AsyncClient, reference: Reference, path: str
) -> None:
    query = QUERIES[0]
    # Strings and {"text": ...} objects may be mixed.
    sent = [d if i % 2 else {"text": d} for i, d in enumerate(DOCUMENTS)]
    body = await post_ok(client, path, {"query": query, "documents": sent})
    pairs = [(query, d) for d in DOCUMENTS]
    check_rerank(body, query, DOCUMENTS, reference(pairs))
    assert body["usage"]["prompt_tokens"] == reference.tokens(pairs)


@pytest.mark.parametrize("top_n", [None, 0, 1, 3, 5, 50])
async def test_rerank_top_n(client: httpx.AsyncClient, reference: Reference, top_n: int) -> None:
    query = QUERIES[2]
    request: dict[str, Any] = {"query": query, "documents": DOCUMENTS}
    if top_n is not None:
        request["top_n"] = top_n
    body = await post_ok(client, "/rerank", request)
    expected = reference([(query, d) for d in DOCUMENTS])
    check_rerank(body, query, DOCUMENTS, expected, top_n=top_n)
    assert len(body["results"]) == min(top_n or len(DOCUMENTS), len(DOCUMENTS))


@pytest.mark.parametrize("path", RERANK_PATHS)
async def test_rerank_without_documents(
    client: httpx.AsyncClient, reference: Reference, path: str
) -> None:
    query = QUERIES[1]
    request = {"query": query, "documents": DOCUMENTS, "return_documents": False, "top_n": 2}
    body = await post_ok(client, path, request)
    expected = reference([(query, d) for d in DOCUMENTS])
    check_rerank(body, query, DOCUMENTS, expected, top_n=2, with_documents=False)


async def test_rerank_without_activation(client: httpx.AsyncClient, reference: Reference) -> None:
    query = QUERIES[0]
    request = {"query": query, "documents": DOCUMENTS, "use_activation": False}
    body = await post_ok(client, "/rerank", request)
    raw = reference([(query, d) for d in DOCUMENTS], raw=True)
    got = {r["index"]: r["relevance_score"] for r in body["results"]}
    np.testing.assert_allclose([got[i] for i in range(len(DOCUMENTS))], raw, rtol=RTOL, atol=1e-6)


async def test_max_model_len_is_the_tiny_models(client: httpx.AsyncClient) -> None:
    response = await client.get("/v1/models")
    assert response.json()["data"][0]["max_model_len"] == 512


async def test_pair_over_the_limit_needs_truncation_on_score(client: httpx.AsyncClient) -> None:
    body = {"queries": QUERIES[0], "documents": [DOCUMENTS[0], LONG_DOCUMENT]}
    error = assert_openai_error(await client.post("/score", json=body), 400)
    assert "truncate_prompt_tokens" in error["message"]
    assert "512" in error["message"]
    assert error["param"] == "documents", error
    # Sent under vLLM's older names, the error names them.
    body = {"text_1": QUERIES[0], "text_2": [DOCUMENTS[0], LONG_DOCUMENT]}
    error = assert_openai_error(await client.post("/score", json=body), 400)
    assert error["param"] == "text_2", error


@pytest.mark.parametrize("path", RERANK_PATHS)
async def test_rerank_cuts_a_long_document_to_the_room_beside_the_query(
    client: httpx.AsyncClient, reference: Reference, path: str
) -> None:
    """As Cohere, Jina and Voyage do: a document too long for the model is cut, not refused,
    and scores as its cut text sent by hand; `max_tokens_per_doc` counts the document's own
    tokens, capped by the room beside the query (the model's 512 fits too)."""
    query, documents = QUERIES[0], [DOCUMENTS[0], LONG_DOCUMENT]
    assert len(reference.tokenizer(query, reference.fitted)["input_ids"]) == 512
    expected = reference([(query, DOCUMENTS[0]), (query, reference.fitted)])
    short = len(reference.tokenizer(query, DOCUMENTS[0])["input_ids"])
    for extra in ({}, {"max_tokens_per_doc": 512}, {"max_tokens_per_doc": 4096}):
        body = await post_ok(client, path, {"query": query, "documents": documents, **extra})
        check_rerank(body, query, documents, expected)
        assert body["usage"]["prompt_tokens"] == short + 512
    # Cut from the left side as asked, it fits as well (the tokenizer's cut of the pair).
    body = {"query": query, "documents": documents, "truncation_side": "left"}
    assert len((await post_ok(client, path, body))["results"]) == 2
    # A query that leaves no room for a document is refused, by its name.
    refused = await client.post(path, json={"query": LONG_DOCUMENT, "documents": ["x"]})
    message = assert_openai_error(refused, 400)["message"]
    assert message.startswith("query has") and "no room for a document" in message, message


async def test_teis_rerank_cuts_by_default_and_refuses_with_truncate_false(
    client: httpx.AsyncClient, reference: Reference
) -> None:
    query, texts = QUERIES[0], [DOCUMENTS[0], LONG_DOCUMENT]
    answer = await post_ok(client, "/rerank", {"query": query, "texts": texts})
    expected = reference([(query, DOCUMENTS[0]), (query, reference.fitted)])
    assert [item["index"] for item in answer] == np.argsort(-expected).tolist()
    np.testing.assert_allclose(
        [item["score"] for item in sorted(answer, key=lambda item: item["index"])],
        expected,
        rtol=RTOL,
    )
    refused = await client.post("/rerank", json={"query": query, "texts": texts, "truncate": False})
    assert refused.status_code == 400, refused.text
    message = refused.json()["error"]
    # The text by its place in `texts` (the query is not counted among them).
    assert message.startswith("texts[1] ") and "`truncate: true`" in message, message


async def test_pair_over_the_limit_truncated(
    client: httpx.AsyncClient, reference: Reference
) -> None:
    pairs = [(QUERIES[0], DOCUMENTS[0]), (QUERIES[0], LONG_DOCUMENT)]
    body = {
        "queries": QUERIES[0],
        "documents": [DOCUMENTS[0], LONG_DOCUMENT],
        "truncate_prompt_tokens": -1,
    }
    response = await post_ok(client, "/score", body)
    np.testing.assert_allclose(scores_of(response), reference(pairs), rtol=RTOL)
    short = len(reference.tokenizer(*pairs[0])["input_ids"])
    assert response["usage"]["prompt_tokens"] == short + 512


@pytest.mark.parametrize("path", ["/score", "/rerank"])
async def test_max_tokens_per_doc_cuts_documents(
    client: httpx.AsyncClient, reference: Reference, path: str
) -> None:
    query = QUERIES[1]
    cut = [reference.cut[d] for d in DOCUMENTS]
    assert cut[1] == "Mix flour, water"  # 4 tokens: mix, flour, ",", water
    expected = reference([(query, d) for d in cut])
    assert not np.allclose(expected, reference([(query, d) for d in DOCUMENTS]), rtol=RTOL)
    if path == "/score":
        body = {"queries": query, "documents": DOCUMENTS, "max_tokens_per_doc": CUT}
        response = await post_ok(client, path, body)
        np.testing.assert_allclose(scores_of(response), expected, rtol=RTOL)
    else:
        body = {"query": query, "documents": DOCUMENTS, "max_tokens_per_doc": CUT}
        response = await post_ok(client, path, body)
        # The documents come back whole; only their scores are those of the cut text.
        check_rerank(response, query, DOCUMENTS, expected)
    assert response["usage"]["prompt_tokens"] == reference.tokens([(query, d) for d in cut])


async def test_max_tokens_per_doc_makes_a_long_pair_fit(
    client: httpx.AsyncClient, reference: Reference
) -> None:
    query = QUERIES[0]
    body = {"query": query, "documents": [LONG_DOCUMENT], "max_tokens_per_doc": CUT}
    response = await post_ok(client, "/rerank", body)
    (result,) = response["results"]
    assert result["index"] == 0
    assert result["document"] == {"text": LONG_DOCUMENT}
    np.testing.assert_allclose(
        result["relevance_score"], reference([(query, LONG_CUT)])[0], rtol=RTOL
    )
    assert response["usage"]["prompt_tokens"] == reference.tokens([(query, LONG_CUT)])


async def test_a_configured_identity_activation_holds_on_every_route(
    cross_encoder_st4_dir: Path, tmp_path: Path
) -> None:
    """The model's activation is applied in one place: a cross-encoder configured with
    Identity gets its raw logits from /score, /classify and /pooling alike."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    directory = tmp_path / "identity"
    shutil.copytree(cross_encoder_st4_dir, directory)
    config = json.loads((directory / "config.json").read_text())
    config["sentence_transformers"]["activation_fn"] = "torch.nn.modules.linear.Identity"
    (directory / "config.json").write_text(json.dumps(config))
    pairs = [(QUERIES[0], document) for document in DOCUMENTS]
    expected_pairs = cross_encoder_reference_scores(directory, pairs)  # the configured Identity
    model = AutoModelForSequenceClassification.from_pretrained(str(directory)).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(directory))
    with torch.no_grad():
        logits = model(**tokenizer(DOCUMENTS, padding=True, return_tensors="pt")).logits
    expected_texts = logits[:, 0].double().numpy()
    assert (expected_texts < 0).any() or (expected_texts > 1).any()  # a sigmoid would show

    with load_engine(directory) as engine:
        async with serving(engine) as http:
            score = await post_ok(http, "/score", {"queries": QUERIES[0], "documents": DOCUMENTS})
            classify = await post_ok(http, "/classify", {"input": DOCUMENTS})
            pooling = await post_ok(http, "/pooling", {"input": DOCUMENTS, "task": "classify"})
    np.testing.assert_allclose(scores_of(score), expected_pairs, rtol=RTOL, atol=1e-6)
    by_classify = np.array([item["probs"][0] for item in classify["data"]])
    by_pooling = np.array([item["data"][0] for item in pooling["data"]])
    np.testing.assert_allclose(by_classify, expected_texts, rtol=RTOL, atol=1e-5)
    np.testing.assert_allclose(by_pooling, expected_texts, rtol=RTOL, atol=1e-5)
