"""Property-based fuzzing of the real server's HTTP API from its own OpenAPI schema (schemathesis).

Every operation gets a bounded number of generated requests (deterministic: the same cases on
every run), on the embedding model's server and on a cross-encoder's, a classifier's, SPLADE's,
ColBERT's and an image-text model's (CLIP: its image inputs, documents and parts). What must
hold for all of them: no 5xx (a 504 only when the request itself asked for a time limit, as it
may), every answer in the shape the spec documents for its status (errors in OpenAI's or
text-embeddings-inference's, as the route says), and the server still healthy afterwards.
Schemathesis' other default checks flag what the API does by design (status codes the schema does
not list, such as 400/404/413; schema-valid bodies refused by semantic checks, such as empty
inputs or an unknown `model`; integral floats like `1.0` refused by strict integer fields), so
they are not run here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import response_schema_conformance

from tests.e2e.harness import running_server

pytestmark = pytest.mark.slow  # a real server process

EXAMPLES = 30
# The operations an embedding model's server documents (the model-specific ones and the common).
OPERATIONS = [
    "POST /tokenize",
    "POST /detokenize",
    "GET /v1/models",
    "GET /v1/models/{model_id}",
    "GET /health",
    "HEAD /health",
    "GET /version",
    "GET /metrics",
    "GET /stats",
    "GET /stats/history",
    "POST /v1/embeddings",
    "POST /v1/score",
    "POST /score",
    "POST /v2/rerank",
    "POST /v1/rerank",
    "POST /rerank",
    "POST /pooling",
    "POST /v2/embed",
    "POST /v1/embed",
    "POST /embed",
    "POST /embed_all",
    "POST /similarity",
    "POST /",
    "GET /info",
    "POST /v1/files",
    "GET /v1/files",
    "GET /v1/files/{file_id}",
    "GET /v1/files/{file_id}/content",
    "DELETE /v1/files/{file_id}",
    "POST /v1/batches",
    "GET /v1/batches",
    "GET /v1/batches/{batch_id}",
    "POST /v1/batches/{batch_id}/cancel",
]


def openapi_document(url: str) -> dict[str, Any]:
    response = httpx.get(f"{url}/openapi.json", timeout=30)
    assert response.status_code == 200, response.text
    document: dict[str, Any] = response.json()
    return document


def dangling_refs(document: dict[str, Any]) -> list[str]:
    """Every `$ref` of the document that does not resolve from the document's root."""

    def resolves(pointer: str) -> bool:
        node: Any = document
        for part in pointer.removeprefix("#/").split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, dict) or part not in node:
                return False
            node = node[part]
        return True

    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and not (ref.startswith("#/") and resolves(ref)):
                found.append(ref)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(document)
    return found


def inline_local_defs(node: Any, defs: dict[str, Any] | None = None) -> Any:
    """A request-body schema with its own `$defs` inlined where they are referenced, so that the
    fuzzer can generate bodies even though those references do not resolve in the document."""
    if isinstance(node, dict):
        defs = {**(defs or {}), **node.get("$defs", {})}
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/") and ref[8:] in defs:
            return inline_local_defs(defs[ref[8:]], defs)
        return {k: inline_local_defs(v, defs) for k, v in node.items() if k != "$defs"}
    if isinstance(node, list):
        return [inline_local_defs(value, defs) for value in node]
    return node


def load_schema(url: str) -> Any:
    """The server's OpenAPI document as schemathesis reads it (request bodies inlined)."""
    document = openapi_document(url)
    for methods in document["paths"].values():
        for operation in methods.values():
            body = operation.get("requestBody", {}).get("content", {}).get("application/json")
            if body is not None:
                body["schema"] = inline_local_defs(body["schema"])
    assert not dangling_refs(document)
    return schemathesis.openapi.from_dict(document)


@pytest.fixture(scope="module")
def api_schema(server_url: str) -> Iterator[Any]:
    schema = load_schema(server_url)
    labels = [result.ok().label for result in schema.get_all_operations()]
    assert sorted(labels) == sorted(OPERATIONS)
    yield schema
    # No crash: the server still answers, and its model runner is alive.
    assert httpx.get(f"{server_url}/health", timeout=10).status_code == 200


def test_openapi_references_resolve(server_url: str) -> None:
    """Request bodies are documented with pydantic's JSON schema; its `#/$defs/...` references
    must resolve in the OpenAPI document, or clients and tools cannot read the schema."""
    assert dangling_refs(openapi_document(server_url)) == []


def check_response(case: Any, response: Any) -> None:
    status = response.status_code
    if status >= 500:
        body = case.body if isinstance(case.body, dict) else {}
        asked = body.get("request_timeout")
        # A client may ask for any positive time limit, however short: then 504 is the answer.
        assert status == 504 and isinstance(asked, int | float), (
            f"{status} for {case.method} {case.path} {case.body!r}: {response.text[:500]}"
        )
        answer = response.json()
        error = answer.get("error", answer.get("detail"))
        assert error["type"] == "timeout_error" if isinstance(error, dict) else error
    if status >= 400:
        body = response.json()
        assert "Traceback" not in response.text
        if "detail" in body:  # Voyage AI's shape, on its bodies
            assert set(body) == {"detail"} and body["detail"], response.text
            return
        if isinstance(body["error"], str):  # text-embeddings-inference's shape, on its routes
            assert set(body) == {"error", "error_type"} and body["error"], response.text
            return
        error = body["error"]
        assert set(error) == {"message", "type", "param", "code"}, response.text
        assert error["code"] == status and error["message"], response.text


# Negative data needs something to break: only the POST routes take input.
CASES = [
    pytest.param(label, mode, id=f"{label}-{mode.value}")
    for label in OPERATIONS
    for mode in GenerationMode
    if mode is GenerationMode.POSITIVE
    or (label.startswith("POST ") and label != "POST /v1/batches/{batch_id}/cancel")
]


def fuzz_operation(
    schema: Any, url: str, label: str, mode: GenerationMode, examples: int
) -> list[int]:
    """`examples` generated requests of one operation, each checked; their statuses."""
    operation = schema.find_operation_by_label(label)
    assert operation is not None, label
    sent: list[int] = []

    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def fuzz(case: Any) -> None:
        response = case.call(base_url=url, timeout=30)
        sent.append(response.status_code)
        check_response(case, response)
        # What came back is what the spec documents for its status (errors in their shape).
        case.validate_response(response, checks=[response_schema_conformance])

    fuzz()
    assert sent, f"no request was generated for {label} ({mode.value})"
    return sent


@pytest.mark.parametrize(("label", "mode"), CASES)
def test_fuzz_operation(api_schema: Any, server_url: str, label: str, mode: GenerationMode) -> None:
    """Positive mode sends bodies the schema allows; negative mode bodies it forbids."""
    fuzz_operation(api_schema, server_url, label, mode, EXAMPLES)


# -- the other model kinds -----------------------------------------------------------------------

# The operations each other kind's server documents beyond the common ones (and only those: a
# route another kind serves is not in its spec).
KIND_OPERATIONS = {
    "cross_encoder_dir": [
        "POST /v1/score", "POST /score", "POST /v2/rerank", "POST /v1/rerank", "POST /rerank",
        "POST /classify", "POST /predict", "POST /", "POST /pooling",
    ],
    "classifier_dir": ["POST /classify", "POST /predict", "POST /", "POST /pooling"],
    "splade_dir": ["POST /embed_sparse", "POST /pooling"],
    "colbert_dir": [
        "POST /v1/score", "POST /score", "POST /v2/rerank", "POST /v1/rerank", "POST /rerank",
        "POST /pooling",
    ],
    # An image-text model: the image forms of /v1/embeddings, /v2/embed, /rerank and /score.
    "clip_dir": [
        "POST /v1/embeddings", "POST /v1/score", "POST /score", "POST /v2/rerank",
        "POST /v1/rerank", "POST /rerank", "POST /pooling", "POST /v2/embed", "POST /v1/embed",
        "POST /embed", "POST /similarity", "POST /",
    ],
}  # fmt: skip
# Every kind's server fetches image URLs (from loopback names only: nothing leaves the machine).
MEDIA_FLAGS = ["--allowed-media-domains", "127.0.0.1", "localhost"]
COMMON_OPERATIONS = [label for label in OPERATIONS if not label.startswith("POST ")] + [
    "POST /tokenize",
    "POST /detokenize",
    "POST /v1/files",
    "POST /v1/batches",
    "POST /v1/batches/{batch_id}/cancel",
]
KIND_EXAMPLES = 10


@pytest.fixture(scope="module", params=sorted(KIND_OPERATIONS))
def kind_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str, Any]]:
    """A server of another model kind (a tiny checkpoint in its real layout), its schema."""
    directory = request.getfixturevalue(request.param)
    flags = [str(directory), *MEDIA_FLAGS]
    with running_server(tmp_path_factory.mktemp("fuzz-kind"), flags) as server:
        schema = load_schema(server.url)
        labels = sorted(result.ok().label for result in schema.get_all_operations())
        assert labels == sorted(COMMON_OPERATIONS + KIND_OPERATIONS[request.param])
        yield request.param, server.url, schema
        assert httpx.get(f"{server.url}/health", timeout=10).status_code == 200


def test_fuzz_every_operation_of_the_other_kinds(kind_server: tuple[str, str, Any]) -> None:
    """The same checks over a cross-encoder's, a classifier's, SPLADE's and ColBERT's servers:
    every POST operation they document, bodies the schema allows and bodies it forbids."""
    kind, url, schema = kind_server
    for label in KIND_OPERATIONS[kind]:
        for mode in GenerationMode:
            fuzz_operation(schema, url, label, mode, KIND_EXAMPLES)
    if kind == "clip_dir":
        fuzz_image_urls(url)
    if "POST /predict" in KIND_OPERATIONS[kind]:
        # No inputs at all (no schema sets a minimum length): a 400, in TEI's shape.
        for path in ("/predict", "/"):
            response = httpx.post(f"{url}{path}", json={"inputs": []}, timeout=30)
            assert response.status_code == 400, response.text
            assert set(response.json()) == {"error", "error_type"}, response.text


# Image URLs as clients mistype them: every scheme, loopback hosts (named, so fetched) and broken
# ones, ports out of range or not numbers, control characters, paths of any length.
image_urls = st.builds(
    lambda scheme, host, port, path: f"{scheme}://{host}{port}/{path}",
    st.sampled_from(["http", "https", "HTTP", "ftp", "gopher", "file", "data", "h ttp"]),
    st.sampled_from(
        ["localhost", "127.0.0.1", "[::1]", "[x", "local\x00host", "127.0.0.1\n", "", "@"]
    ),
    st.sampled_from(["", ":0", ":1", ":-1", ":99999", ":abc", ":"]),
    st.text(max_size=40) | st.just("x" * 100_000),
)


def fuzz_image_urls(url: str) -> None:
    """Every image entry point with URL fetching on: a 400 (or 413) in OpenAI's shape, never a
    5xx, whatever the URL."""

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None)
    @given(source=image_urls, route=st.sampled_from(["/v1/embeddings", "/rerank", "/score"]))
    def post(source: str, route: str) -> None:
        part = {"type": "image_url", "image_url": {"url": source}}
        body: dict[str, Any] = {
            "/v1/embeddings": {"input": [{"image": source}]},
            "/rerank": {"query": "a flower", "documents": [{"image": source}]},
            "/score": {"queries": "a flower", "documents": {"content": [part]}},
        }[route]
        response = httpx.post(f"{url}{route}", json=body, timeout=30)
        assert response.status_code in (400, 413), (source[:80], response.text[:300])
        error = response.json()["error"]
        assert error["param"] in ("input", "documents"), error
        assert len(error["message"]) < 2000, len(error["message"])

    post()


# The generated /score bodies almost never carry both `queries` and `documents` (the schema cannot
# require them: `text_1`/`text_2` are accepted instead), so pairs are also generated directly.
texts = st.text(max_size=40)


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None)
@given(
    query=texts,
    documents=st.lists(texts | st.builds(lambda text: {"text": text}, texts), max_size=4),
    top_n=st.none() | st.integers(min_value=-1, max_value=6),
    route=st.sampled_from(["/score", "/rerank"]),
)
def test_fuzz_score_and_rerank_pairs(
    server_url: str, query: str, documents: list[Any], top_n: int | None, route: str
) -> None:
    if route == "/score":
        plain = [doc["text"] if isinstance(doc, dict) else doc for doc in documents]
        body: dict[str, Any] = {"queries": query, "documents": plain}
    else:
        body = {"query": query, "documents": documents, "top_n": top_n}
    response = httpx.post(f"{server_url}{route}", json=body, timeout=30)
    assert response.status_code in (200, 400), response.text
    if response.status_code == 400:
        assert set(response.json()["error"]) == {"message", "type", "param", "code"}
        return
    results = response.json()["data" if route == "/score" else "results"]
    expected = len(documents) if not top_n else min(top_n, len(documents))
    assert len(results) == expected, (body, results)
    for result in results:
        score = result["score" if route == "/score" else "relevance_score"]
        assert -1.0 - 1e-6 <= score <= 1.0 + 1e-6, result
