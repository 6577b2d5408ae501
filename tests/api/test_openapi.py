"""The OpenAPI document says what every route answers, and what is sent matches it.

Each route's real responses (every model kind, every output shape) are validated against the
documented response model with unknown fields forbidden, so the documentation cannot drift.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from poolserve import Engine
from poolserve.apis import answer_docs, cohere, openai_wire, rerank, vllm, voyage
from poolserve.apis.tei import answers as tei
from tests.api.helpers import load_engine, serving

pytestmark = pytest.mark.anyio

# (route, body, documented response) for each kind of model.
EMBEDDING_CALLS: list[tuple[str, Any, type[BaseModel]]] = [
    ("/v1/embeddings", {"input": ["a", "b"]}, openai_wire.EmbeddingResponse),
    ("/v1/embeddings", {"input": "a", "encoding_format": "base64"}, openai_wire.EmbeddingResponse),
    ("/v2/embed", {"texts": ["a"]}, cohere.CohereEmbedResponse),
    (
        "/v2/embed",
        {
            "texts": ["a"],
            "embedding_types": ["float", "int8", "uint8", "binary", "ubinary", "base64"],
        },
        cohere.CohereEmbedResponse,
    ),
    ("/v1/embed", {"texts": ["a", "b"]}, cohere.CohereEmbedResponse),
    ("/v1/embed", {"texts": ["a"], "embedding_types": ["int8"]}, cohere.CohereEmbedResponse),
    ("/pooling", {"input": ["a"]}, vllm.PoolingResponse),
    ("/pooling", {"input": ["a"], "task": "token_embed"}, vllm.PoolingResponse),
    ("/pooling", {"input": "a", "encoding_format": "base64"}, vllm.PoolingResponse),
    ("/score", {"queries": "a", "documents": ["b", "c"]}, vllm.ScoreResponse),
    ("/rerank", {"query": "a", "documents": ["b", "c"]}, rerank.RerankResponse),
    (
        "/rerank",
        {"query": "a", "documents": ["b"], "return_documents": False},
        rerank.RerankResponse,
    ),
    (
        "/v1/embeddings",
        {"input": ["a", "b"], "input_type": "query", "output_dtype": "int8"},
        voyage.VoyageEmbedResponse,
    ),
    (
        "/v1/embeddings",
        {"input": "a", "truncation": True, "encoding_format": "base64"},
        voyage.VoyageEmbedResponse,
    ),
    (
        "/v1/rerank",
        {"query": "a", "documents": ["b", "c"], "top_k": 1, "return_documents": True},
        voyage.VoyageRerankResponse,
    ),
    ("/tokenize", {"prompt": "a b", "return_token_strs": True}, answer_docs.TokenizeResponse),
    ("/tokenize", {"prompt": "a b"}, answer_docs.TokenizeResponse),
    ("/detokenize", {"tokens": [101, 102]}, answer_docs.DetokenizeResponse),
    ("/embed", {"inputs": ["a", "b"]}, tei.TeiEmbedResponse),
    ("/embed_all", {"inputs": "a b"}, tei.TeiEmbedResponse),
    (
        "/similarity",
        {"inputs": {"source_sentence": "a", "sentences": ["b"]}},
        tei.TeiSimilarityResponse,
    ),
    ("/rerank", {"query": "a", "texts": ["b"], "return_text": True}, tei.TeiRerankResponse),
    ("/tokenize", {"inputs": ["a b"]}, tei.TeiTokenizeResponse),
    ("/", {"inputs": "a"}, tei.TeiEmbedResponse),
]
GETS: list[tuple[str, type[BaseModel]]] = [
    ("/v1/models", answer_docs.ModelList),
    ("/v1/models/sentence-transformers/all-MiniLM-L6-v2", answer_docs.ModelCard),
    ("/health", answer_docs.Health),
    ("/version", answer_docs.VersionBody),
    ("/stats", answer_docs.StatsBody),
    ("/info", tei.TeiInfo),
]
OTHER_KINDS: dict[str, list[tuple[str, Any, type[BaseModel]]]] = {
    "classifier_dir": [
        ("/classify", {"input": ["a", "b"]}, vllm.ClassifyResponse),
        ("/pooling", {"input": ["a"], "task": "classify"}, vllm.PoolingResponse),
    ],
    "splade_dir": [
        ("/embed_sparse", {"inputs": ["a b"]}, tei.SparseResponse),
        ("/pooling", {"input": ["a b"], "task": "sparse"}, vllm.PoolingResponse),
    ],
    "token_classifier_dir": [
        ("/pooling", {"input": ["a b"], "task": "token_classify"}, vllm.PoolingResponse),
    ],
}


@pytest.fixture(scope="module", params=sorted(OTHER_KINDS))
def other_kind(request: pytest.FixtureRequest) -> Iterator[tuple[str, Engine]]:
    directory: Path = request.getfixturevalue(request.param)
    with load_engine(directory) as engine:
        yield request.param, engine


async def test_every_response_matches_its_documented_schema(engine: Any) -> None:
    async with serving(engine) as client:
        for path, body, model in EMBEDDING_CALLS:
            response = await client.post(path, json=body)
            assert response.status_code == 200, (path, response.text)
            model.model_validate(response.json())
        for path, model in GETS:
            response = await client.get(path)
            assert response.status_code == 200, path
            model.model_validate(response.json())
        error = await client.post("/v1/embeddings", json={"input": 5})
        answer_docs.ErrorBody.model_validate(error.json())


async def test_other_kinds_match_their_documented_schemas(other_kind: tuple[str, Engine]) -> None:
    name, engine = other_kind
    async with serving(engine) as client:
        for path, body, model in OTHER_KINDS[name]:
            response = await client.post(path, json=body)
            assert response.status_code == 200, (path, response.text)
            model.model_validate(response.json())


async def test_the_spec_documents_each_routes_body_and_answers(engine: Any) -> None:
    async with serving(engine) as client:
        spec = (await client.get("/openapi.json")).json()
    served = [path for path, _, _ in EMBEDDING_CALLS] + [path for path, _ in GETS[:-1]]
    for path in {*served, "/stats", "/v1/rerank", "/v2/rerank", "/v1/score"}:
        template = "/v1/models/{model_id}" if path.startswith("/v1/models/") else path
        operations = spec["paths"][template]
        for method, operation in operations.items():
            if method == "head":
                continue
            answers = operation["responses"]
            assert "$ref" in str(answers["200"]["content"]["application/json"]["schema"]), path
            if method == "post":
                assert "requestBody" in operation, path
                for status in ("400", "413", "429"):
                    assert status in answers, (path, status)


def documented_error_shapes(spec: dict[str, Any], path: str, status: int) -> set[str]:
    """The schema names the spec gives a POST route's error response of `status`."""
    answer = spec["paths"][path]["post"]["responses"][str(status)]
    schema = answer["content"]["application/json"]["schema"]
    options = schema.get("anyOf", [schema])
    return {option["$ref"].rsplit("/", 1)[-1] for option in options}


ERROR_MODELS: dict[str, type[BaseModel]] = {
    "ErrorBody": answer_docs.ErrorBody,
    "TeiErrorBody": tei.TeiErrorBody,
    "DetailErrorBody": voyage.DetailErrorBody,
}


def assert_documented_error(spec: dict[str, Any], path: str, response: httpx.Response) -> str:
    """The error validates against the shape the spec documents for its route and status (and
    only one shape: which one it is is returned)."""
    shapes = documented_error_shapes(spec, path, response.status_code)
    matching = set()
    for name in shapes:
        try:
            ERROR_MODELS[name].model_validate(response.json())
        except ValueError:
            continue
        matching.add(name)
    assert len(matching) == 1, (path, response.status_code, shapes, response.text)
    return matching.pop()


# Bad bodies on every route of text-embeddings-inference's family, and on the routes that take
# its bodies or Voyage AI's next to another family's: each error in the documented shape.
FAMILY_ROUTE_ERRORS = [
    ("/embed", {"inputs": []}, "TeiErrorBody"),
    ("/embed", {"inputs": "a", "unknown": 1}, "TeiErrorBody"),
    ("/embed_all", {"inputs": 5}, "TeiErrorBody"),
    ("/similarity", {"inputs": {"source_sentence": "a"}}, "TeiErrorBody"),
    ("/", {"inputs": ""}, "TeiErrorBody"),
    ("/rerank", {"query": "a", "texts": ["b"], "truncate": "yes"}, "TeiErrorBody"),
    ("/rerank", {"query": "a", "documents": ["b"], "top_n": "x"}, "ErrorBody"),
    ("/tokenize", {"inputs": ["a"], "add_special_tokens": 2}, "TeiErrorBody"),
    ("/tokenize", {"prompt": 5}, "ErrorBody"),
    ("/v1/embeddings", {"input": [], "input_type": "query"}, "DetailErrorBody"),
    ("/v1/embeddings", {"input": "a", "truncation": True, "dimensions": 8}, "DetailErrorBody"),
    ("/v1/embeddings", {"input": "a", "dimensions": "8"}, "ErrorBody"),
    ("/v1/rerank", {"query": "a", "documents": ["b"], "top_k": 0}, "DetailErrorBody"),
]


async def test_errors_take_the_shape_the_spec_documents_for_their_route(engine: Any) -> None:
    async with serving(engine) as client:
        spec = (await client.get("/openapi.json")).json()
        for path, body, shape in FAMILY_ROUTE_ERRORS:
            response = await client.post(path, json=body)
            assert response.status_code == 400, (path, body, response.text)
            assert assert_documented_error(spec, path, response) == shape, (path, body)
        # What the door refuses is OpenAI's, on every route: documented so.
        assert documented_error_shapes(spec, "/embed", 401) == {"ErrorBody"}
        assert documented_error_shapes(spec, "/embed", 429) == {"ErrorBody", "TeiErrorBody"}


async def test_sparse_and_late_interaction_servers_document_only_the_routes_they_serve(
    splade_dir: Path, colbert_dir: Path
) -> None:
    """POST / (feature extraction or text classification) is neither's: not in the spec, and
    answered 405 naming what is served; /embed_sparse answers in TEI's shape, as documented."""
    for directory in (splade_dir, colbert_dir):
        with load_engine(directory) as engine:
            async with serving(engine) as client:
                spec = (await client.get("/openapi.json")).json()
                assert "post" not in spec["paths"].get("/", {}), directory
                response = await client.post("/", json={"inputs": "a b"})
                assert response.status_code == 405, response.text
                message = response.json()["error"]["message"]
                assert message.startswith("POST / is not served here") and "/pooling" in message
                if directory != splade_dir:
                    continue
                response = await client.post("/embed_sparse", json={"inputs": []})
                assert response.status_code == 400, response.text
                assert assert_documented_error(spec, "/embed_sparse", response) == "TeiErrorBody"


async def test_every_operation_documents_the_500_a_bug_can_still_answer(engine: Any) -> None:
    """UnexpectedErrorMiddleware answers a bug with a 500 (the connection kept): every
    operation lists it, in OpenAI's shape at least; /health its 503 (a dead runner)."""
    async with serving(engine) as client:
        spec = (await client.get("/openapi.json")).json()
    ours = [
        (path, method, operation)
        for path, methods in spec["paths"].items()
        if not path.startswith(("/docs", "/redoc", "/openapi"))
        for method, operation in methods.items()
    ]
    documented = [
        (path, method, operation)
        for path, method, operation in ours
        if any(status.startswith("4") for status in operation["responses"])
    ]
    assert len(documented) > 20
    for path, method, operation in ours:
        assert "500" in operation["responses"], (method, path)
    for method in ("get", "head"):
        assert "503" in spec["paths"]["/health"][method]["responses"]
