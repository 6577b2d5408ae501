"""The other routes: /tokenize, /detokenize, /v1/models, /health, /version, /stats."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from poolserve import __version__
from tests.reference import MAX_LEN, MODEL_ID, Corpus

pytestmark = pytest.mark.anyio


async def test_tokenize_matches_the_reference_tokenizer(
    client: httpx.AsyncClient, hf_tokenizer: Any, corpus: Corpus
) -> None:
    for text in [corpus.within[0], corpus.within[35], corpus.within[-1], corpus.over[0]]:
        response = await client.post(
            "/tokenize", json={"prompt": text, "return_token_strs": True, "model": MODEL_ID}
        )
        assert response.status_code == 200
        body = response.json()
        expected = hf_tokenizer(text, truncation=False)["input_ids"]
        assert body["tokens"] == expected
        assert body["count"] == len(expected)
        assert body["max_model_len"] == MAX_LEN
        assert body["token_strs"] == hf_tokenizer.convert_ids_to_tokens(expected)


async def test_tokenize_without_special_tokens(
    client: httpx.AsyncClient, hf_tokenizer: Any
) -> None:
    text = "Hello there, tokenizer!"
    body = (
        await client.post("/tokenize", json={"prompt": text, "add_special_tokens": False})
    ).json()
    assert body["tokens"] == hf_tokenizer(text, add_special_tokens=False)["input_ids"]
    assert body["count"] == len(body["tokens"])


async def test_detokenize_round_trip(client: httpx.AsyncClient, hf_tokenizer: Any) -> None:
    text = "round trip of some text"
    ids = hf_tokenizer(text)["input_ids"]
    response = await client.post("/detokenize", json={"tokens": ids})
    assert response.status_code == 200
    assert response.json()["prompt"] == hf_tokenizer.decode(ids)
    assert "round trip of some text" in response.json()["prompt"]


async def test_models(client: httpx.AsyncClient) -> None:
    response = await client.get("/v1/models")
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "list"
    assert len(body["data"]) == 1
    model = body["data"][0]
    assert model["id"] == MODEL_ID
    assert model["object"] == "model"
    assert model["max_model_len"] == MAX_LEN


async def test_health_and_version(client: httpx.AsyncClient) -> None:
    assert (await client.get("/health")).status_code == 200
    response = await client.get("/version")
    assert response.status_code == 200
    assert response.json()["version"] == __version__


async def test_stats_count_the_work_done(client: httpx.AsyncClient) -> None:
    before = (await client.get("/stats")).json()
    response = await client.post("/v1/embeddings", json={"input": ["one", "two", "three"]})
    assert response.status_code == 200
    after = (await client.get("/stats")).json()
    assert after["items"] - before["items"] == 3
    # One batch, or split between runners that were both idle.
    sizes = {
        int(size): count - before["batch_sizes"].get(size, 0)
        for size, count in after["batch_sizes"].items()
    }
    assert sum(size * count for size, count in sizes.items()) == 3
    assert after["batches"] - before["batches"] == sum(sizes.values())
    assert after["max_batch_size"] == max(int(size) for size in after["batch_sizes"])
    assert after["queued_items"] == 0
    runners = after["runners"]
    assert [runner["index"] for runner in runners] == list(range(len(runners)))
    assert all(runner["alive"] for runner in runners)
    assert sum(runner["items"] for runner in runners) == after["items"]


async def test_head_health_for_load_balancers(client: httpx.AsyncClient) -> None:
    response = await client.head("/health")
    assert response.status_code == 200
    assert response.content == b""


async def test_retrieve_one_model(client: httpx.AsyncClient) -> None:
    response = await client.get(f"/v1/models/{MODEL_ID}")
    assert response.status_code == 200, response.text
    card = response.json()
    assert (card["id"], card["object"], card["max_model_len"]) == (MODEL_ID, "model", MAX_LEN)
    response = await client.get("/v1/models/not-served")
    assert response.status_code == 404
    assert MODEL_ID in response.json()["error"]["message"]


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("POST", "/v1/embeddings", {"input": ""}, 400),
        ("POST", "/v1/embeddings", {"input": "x", "model": "other"}, 404),
        ("GET", "/no-such-route", None, 404),
        ("GET", "/v1/embeddings", None, 405),
        ("POST", "/v1/embeddings", {"input": ["x"] * 2049}, 413),
        ("GET", "/health", None, 200),
        ("POST", "/v1/embeddings", {"input": "x"}, 200),
    ],
)
async def test_every_response_carries_a_request_id(
    client: httpx.AsyncClient, method: str, path: str, body: Any, status: int
) -> None:
    response = await client.request(method, path, json=body)
    assert response.status_code == status, response.text
    assert response.headers["x-request-id"]
    response = await client.request(method, path, json=body, headers={"x-request-id": "mine-7"})
    assert response.headers["x-request-id"] == "mine-7"
    assert response.headers.get_list("x-request-id") == ["mine-7"]


async def test_a_route_the_model_does_not_serve_says_what_it_is(
    client: httpx.AsyncClient,
) -> None:
    response = await client.post("/classify", json={"input": "q"})
    assert response.status_code == 404
    message = response.json()["error"]["message"]
    assert (
        "'sentence-transformers/all-MiniLM-L6-v2' is an embedding model, which serves " in message
    )
    assert "/v1/embeddings" in message, message


async def test_health_names_each_model_and_its_runners(client: httpx.AsyncClient) -> None:
    response = await client.get("/health")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    ((name, runners),) = body["models"].items()
    assert name and runners["runners_alive"] == runners["runners"] >= 1


NULL_DEFAULTS = [
    ("/v1/embeddings", {"input": ["a cat", "a dog"]}, ["encoding_format", "dimensions", "user"]),
    ("/v1/embed", {"texts": ["a cat"]}, ["truncate", "input_type", "embedding_types"]),
    ("/v2/embed", {"texts": ["a cat"], "input_type": "search_query"}, ["truncate", "max_tokens"]),
    ("/embed", {"inputs": "a cat"}, ["truncate", "truncation_direction", "normalize"]),
    (
        "/rerank",
        {"query": "a pet", "documents": ["a cat", "a car"]},
        ["return_documents", "top_n", "truncation_side"],
    ),
]


def stable(body: Any) -> Any:
    """A response without what differs between two calls (ids, timings)."""
    if not isinstance(body, dict):
        return body
    return {k: v for k, v in body.items() if k not in ("id", "created", "usage", "meta")}


@pytest.mark.parametrize(("route", "body", "nulls"), NULL_DEFAULTS)
async def test_null_is_the_default_on_every_optional_field(
    client: httpx.AsyncClient, route: str, body: dict[str, Any], nulls: list[str]
) -> None:
    """As LangChain's CohereEmbeddings sends `"truncate": null`: the same answer as without."""
    plain = await client.post(route, json=body)
    with_nulls = await client.post(route, json={**body, **dict.fromkeys(nulls)})
    assert plain.status_code == with_nulls.status_code == 200, with_nulls.text
    assert stable(with_nulls.json()) == stable(plain.json())
    # A required field sent as null is still refused.
    required = next(iter(body))
    refused = await client.post(route, json={**body, required: None})
    assert refused.status_code in (400, 422), refused.text
