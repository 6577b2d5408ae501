"""The fingerprint of the embedding space over HTTP: in the `x-embedding-space` header of every
route that answers vectors and in the body where the family has room, in `/v1/models`; the same
for the same space on every route; another one when the dimensions, normalization or embedding
type change, not when the float encoding or the lane do; and `x-expect-embedding-space` that
does not match is a 409 before any work."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.api.helpers import assert_openai_error

pytestmark = pytest.mark.anyio

TEXTS = ["An index built with one model.", "Queried through another."]
HEADER = "x-embedding-space"


async def space_of(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> str:
    response = await client.post(path, json=body)
    assert response.status_code == 200, response.text
    space: str = response.headers[HEADER]
    return space


async def test_one_space_one_fingerprint_on_every_route_and_in_the_bodies(
    client: httpx.AsyncClient,
) -> None:
    openai = await client.post("/v1/embeddings", json={"input": TEXTS})
    space = openai.headers[HEADER]
    assert space.startswith("es1-") and len(space) == 4 + 16
    assert openai.json()["embedding_space"] == space
    cohere = await client.post("/v2/embed", json={"texts": TEXTS, "input_type": "search_query"})
    assert cohere.headers[HEADER] == space
    assert cohere.json()["meta"]["embedding_spaces"] == {"float": space}
    pooling = await client.post("/pooling", json={"input": TEXTS})
    assert pooling.headers[HEADER] == space and pooling.json()["embedding_space"] == space
    voyage = await client.post("/v1/embeddings", json={"input": TEXTS, "input_type": "query"})
    assert voyage.headers[HEADER] == space and voyage.json()["embedding_space"] == space
    assert await space_of(client, "/embed", {"inputs": TEXTS}) == space  # TEI: a bare array
    card = (await client.get("/v1/models")).json()["data"][0]
    assert card["embedding_space"] == space
    # Routes that answer no vectors carry none.
    rerank = await client.post("/rerank", json={"query": "a", "documents": TEXTS})
    assert rerank.status_code == 200 and HEADER not in rerank.headers
    token_vectors = await space_of(client, "/pooling", {"input": TEXTS, "task": "token_embed"})
    assert token_vectors != space


async def test_what_changes_the_space_changes_the_fingerprint_and_nothing_else_does(
    client: httpx.AsyncClient,
) -> None:
    plain = await space_of(client, "/v1/embeddings", {"input": TEXTS})
    same = [
        await space_of(client, "/v1/embeddings", {"input": TEXTS, "encoding_format": "base64"}),
        await space_of(client, "/v1/embeddings", {"input": TEXTS, "embed_dtype": "float16"}),
        await space_of(client, "/v1/embeddings", {"input": TEXTS, "priority": 9}),
        await space_of(client, "/v1/embeddings", {"input": TEXTS, "dimensions": 384}),
    ]
    assert same == [plain] * len(same)
    other = {
        await space_of(client, "/v1/embeddings", {"input": TEXTS, "dimensions": 128}),
        await space_of(client, "/v1/embeddings", {"input": TEXTS, "normalize": False}),
        await space_of(client, "/v1/embeddings", {"input": TEXTS, "embed_dtype": "int8"}),
        await space_of(client, "/v1/embeddings", {"input": TEXTS, "embed_dtype": "ubinary"}),
    }
    assert len(other) == 4 and plain not in other
    body = {"texts": TEXTS, "embedding_types": ["base64", "int8"]}
    both = await client.post("/v2/embed", json=body)
    spaces = both.json()["meta"]["embedding_spaces"]  # keyed as `embeddings` is
    assert set(spaces) == set(both.json()["embeddings"]) == {"base64", "int8"}
    assert spaces["base64"] == plain and spaces["int8"] != plain
    assert both.headers[HEADER] == f"{spaces['base64']}, {spaces['int8']}"
    # The header sent back pins both spaces; one of them alone does not cover the other.
    echoed = {"x-expect-embedding-space": both.headers[HEADER]}
    assert (await client.post("/v2/embed", json=body, headers=echoed)).status_code == 200
    pinned = {"x-expect-embedding-space": plain}
    assert (await client.post("/v2/embed", json=body, headers=pinned)).status_code == 409


async def test_an_expected_space_that_does_not_match_is_409_before_any_work(
    client: httpx.AsyncClient,
) -> None:
    space = await space_of(client, "/v1/embeddings", {"input": TEXTS})
    pinned = {"x-expect-embedding-space": space}
    assert (await client.post("/v1/embeddings", json={"input": TEXTS}, headers=pinned)).is_success
    before = (await client.get("/stats")).json()["items"]
    response = await client.post(
        "/v1/embeddings", json={"input": TEXTS, "dimensions": 64}, headers=pinned
    )
    error = assert_openai_error(response, 409)
    assert space in error["message"] and "64 dimensions" in error["message"]
    assert "nothing was run" in error["message"]
    elsewhere = await client.post(
        "/embed", json={"inputs": TEXTS}, headers={"x-expect-embedding-space": "es1-" + "0" * 16}
    )
    assert elsewhere.status_code == 409
    assert (await client.get("/stats")).json()["items"] == before
