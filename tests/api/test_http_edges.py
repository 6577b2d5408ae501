"""What browsers and HTTP clients expect beyond the API itself: CORS when asked for, gzip for
large responses, and API documentation that works without the internet."""

from __future__ import annotations

import gzip
import re
from typing import Any

import httpx
import orjson
import pytest
from asgi_lifespan import LifespanManager

from poolserve import ServerConfig
from poolserve.app import create_app
from tests.api.helpers import serving

pytestmark = pytest.mark.anyio

ORIGIN = "https://app.example"
TEXTS = [f"sentence number {i} about bread" for i in range(40)]  # ~320 KB of JSON floats


async def wire_bytes(
    client: httpx.AsyncClient, body: Any, accept_encoding: str
) -> tuple[httpx.Response, bytes]:
    """POST and return the body as it went over the wire (httpx would decode it)."""
    headers = {"content-type": "application/json", "accept-encoding": accept_encoding}
    request = client.build_request(
        "POST", "/v1/embeddings", content=orjson.dumps(body), headers=headers
    )
    response = await client.send(request, stream=True)
    raw = b"".join([chunk async for chunk in response.aiter_raw()])
    await response.aclose()
    assert response.status_code == 200, raw[:200]
    return response, raw


async def test_a_large_response_is_gzipped_for_a_client_that_accepts_it(engine: Any) -> None:
    async with serving(engine, ServerConfig(gzip_min_bytes=64 * 1024)) as client:
        plain, plain_bytes = await wire_bytes(client, {"input": TEXTS}, "identity")
        assert "content-encoding" not in plain.headers
        assert len(plain_bytes) > 64 * 1024
        zipped, zipped_bytes = await wire_bytes(client, {"input": TEXTS}, "br, gzip;q=0.8")
        assert zipped.headers["content-encoding"] == "gzip"
        assert zipped.headers["vary"] == "accept-encoding"
        assert int(zipped.headers["content-length"]) == len(zipped_bytes)
        unzipped, expected = orjson.loads(gzip.decompress(zipped_bytes)), orjson.loads(plain_bytes)
        assert unzipped["data"] == expected["data"]
        assert unzipped["usage"] == expected["usage"]
        assert len(zipped_bytes) * 2 < len(plain_bytes)
        for refusing in ("gzip;q=0", "br", ""):
            response, _ = await wire_bytes(client, {"input": TEXTS}, refusing)
            assert "content-encoding" not in response.headers, refusing
        small, _ = await wire_bytes(client, {"input": "one sentence"}, "gzip")
        assert "content-encoding" not in small.headers
    async with serving(engine, ServerConfig(gzip_min_bytes=0)) as client:
        never, _ = await wire_bytes(client, {"input": TEXTS}, "gzip")
        assert "content-encoding" not in never.headers


async def test_cors_is_off_unless_origins_are_allowed(engine: Any) -> None:
    preflight = {"origin": ORIGIN, "access-control-request-method": "POST"}
    async with serving(engine) as client:
        response = await client.post(
            "/v1/embeddings", json={"input": "x"}, headers={"origin": ORIGIN}
        )
        assert "access-control-allow-origin" not in response.headers
        assert (await client.options("/v1/embeddings", headers=preflight)).status_code == 405


async def test_allowed_origins_get_cors_headers_on_answers_and_refusals(engine: Any) -> None:
    config = ServerConfig(allowed_origins=(ORIGIN,), api_keys=("secret",))
    preflight = {
        "origin": ORIGIN,
        "access-control-request-method": "POST",
        "access-control-request-headers": "authorization, content-type",
    }
    async with serving(engine, config) as client:
        response = await client.options("/v1/embeddings", headers=preflight)
        assert response.status_code == 200
        assert response.headers["access-control-allow-origin"] == ORIGIN
        assert "authorization" in response.headers["access-control-allow-headers"].lower()
        key = {"authorization": "Bearer secret", "origin": ORIGIN}
        answered = await client.post("/v1/embeddings", json={"input": "x"}, headers=key)
        assert answered.status_code == 200
        assert answered.headers["access-control-allow-origin"] == ORIGIN
        exposed = answered.headers["access-control-expose-headers"].lower()
        assert "x-request-id" in exposed and "retry-after" in exposed
        # A refusal is readable by the page too (the browser would hide a bare 401).
        refused = await client.post(
            "/v1/embeddings", json={"input": "x"}, headers={"origin": ORIGIN}
        )
        assert refused.status_code == 401
        assert refused.headers["access-control-allow-origin"] == ORIGIN
        other = {"origin": "https://elsewhere.example", "access-control-request-method": "POST"}
        assert (await client.options("/v1/embeddings", headers=other)).status_code == 400


async def test_the_docs_page_loads_its_assets_from_the_server(engine: Any) -> None:
    """No CDN: every script and stylesheet /docs and /redoc name is served here, also behind an
    API key (the page holds no secret, and a browser cannot send the key to load it)."""
    async with serving(engine, ServerConfig(api_keys=("secret",))) as client:
        for page in ("/docs", "/redoc"):
            response = await client.get(page)
            assert response.status_code == 200, page
            assets = re.findall(r'(?:src|href)="([^"]+)"', response.text)
            assert assets, response.text
            for asset in assets:
                assert not asset.startswith(("http:", "https:", "//")), asset
                fetched = await client.get(asset)
                assert fetched.status_code == 200, asset
                assert len(fetched.content) > 1000 or asset.endswith(".png"), asset
        spec = (await client.get("/openapi.json")).json()
        assert spec["openapi"].startswith("3.1")
        assert (await client.post("/v1/embeddings", json={"input": "x"})).status_code == 401


async def test_a_gzipped_body_is_read_and_a_bomb_is_refused(engine: Any) -> None:
    """`Content-Encoding: gzip` bodies (requests' and aiohttp's clients can send them) give the
    answer the plain body gives; one that inflates past --max-request-bytes is a 413, broken
    gzip a 400, another encoding a 415."""
    body = orjson.dumps({"input": ["a gzipped sentence", "and another one"]})
    async with serving(engine, ServerConfig(max_request_bytes=64 * 1024)) as client:
        plain = await client.post("/v1/embeddings", content=body)
        zipped = await client.post(
            "/v1/embeddings",
            content=gzip.compress(body),
            headers={"content-encoding": "gzip", "content-type": "application/json"},
        )
        assert zipped.status_code == plain.status_code == 200, zipped.text
        assert zipped.json()["data"] == plain.json()["data"]
        bomb = gzip.compress(orjson.dumps({"input": ["word " * 100_000]}))
        assert len(bomb) < 64 * 1024
        cases = [
            (bomb, "gzip", 413, "once decompressed"),
            (b"not gzip at all", "gzip", 400, "not valid gzip"),
            (body, "br", 415, "Content-Encoding 'br' is not supported"),
        ]
        for content, encoding, status, message in cases:
            response = await client.post(
                "/v1/embeddings", content=content, headers={"content-encoding": encoding}
            )
            assert response.status_code == status, response.text
            assert message in response.json()["error"]["message"]
        tei = await client.post(
            "/embed",
            content=gzip.compress(b'{"inputs": "x"}'),
            headers={"content-encoding": "gzip"},
        )
        assert tei.status_code == 200 and len(tei.json()) == 1


async def test_a_body_too_large_is_refused_before_it_waits_for_admission(engine: Any) -> None:
    """With admission full, a `Content-Length` past --max-request-bytes gets its 413 at once:
    it never waits at the door for room it could not use."""
    app = create_app(engine.service, ServerConfig(max_request_bytes=4096, max_queued_tokens=16384))
    admission = app.state.serving.admission
    async with (
        LifespanManager(app) as manager,
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=manager.app), base_url="http://poolserve.test"
        ) as client,
    ):
        held = [admission.admit(4096), admission.admit(4096)]
        for ticket in held:
            admission.resize(ticket, 8192)  # together, the whole bound
        try:
            response = await client.post("/v1/embeddings", content=b"x" * 5000)
            assert response.status_code == 413, response.text
            assert admission.waited == 0 and admission.waiting == 0
        finally:
            for ticket in held:
                admission.release(ticket)


@pytest.mark.parametrize("number", ["1e999", "-1e999", "NaN", "Infinity"])
async def test_every_route_reads_a_non_finite_number_alike(
    client: httpx.AsyncClient, number: str
) -> None:
    """One JSON reading everywhere: the same number gets the same answer on every route (an
    infinite timeout was accepted by some and refused as not JSON by others)."""
    bodies = {
        "/v1/embeddings": '{"input": "x", "request_timeout": %s}',
        "/embed": '{"inputs": "x", "request_timeout": %s}',
        "/pooling": '{"input": "x", "request_timeout": %s}',
        "/tokenize": '{"prompt": "x", "request_timeout": %s}',
        "/detokenize": '{"tokens": [101], "request_timeout": %s}',
        "/rerank": '{"query": "q", "documents": ["d"], "request_timeout": %s}',
    }
    for path, body in bodies.items():
        response = await client.post(
            path, content=body % number, headers={"content-type": "application/json"}
        )
        assert response.status_code == 400, (path, response.text)
        assert "request_timeout: Input should be a finite number" in response.text, path


async def test_a_broken_gzip_stream_says_gzip(client: httpx.AsyncClient) -> None:
    whole = gzip.compress(b'{"input": "x"}')
    for broken in (whole[:-9], whole[:12]):
        response = await client.post(
            "/v1/embeddings",
            content=broken,
            headers={"content-type": "application/json", "content-encoding": "gzip"},
        )
        assert response.status_code == 400
        assert "gzip stream is cut short" in response.json()["error"]["message"]


async def test_an_unknown_model_is_named_by_a_bounded_prefix(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/embeddings", json={"input": "x", "model": "m" * 100_000})
    assert response.status_code == 404
    message = response.json()["error"]["message"]
    assert "(100000 characters)" in message and len(message) < 1000


@pytest.mark.parametrize("media_type", ["text/plain", "application/x-www-form-urlencoded", None])
async def test_a_json_body_is_read_whatever_its_content_type(
    client: httpx.AsyncClient, media_type: str | None
) -> None:
    """A documented choice (docs/apis.md): `curl -d` sends form-urlencoded, other tools
    text/plain; the body is JSON whatever the header says."""
    headers = {"content-type": media_type} if media_type else {}
    response = await client.post("/v1/embeddings", content=b'{"input": "x"}', headers=headers)
    assert response.status_code == 200, response.text


async def test_unknown_fields_and_prompt_names_are_named_by_bounded_prefixes(
    client: httpx.AsyncClient,
) -> None:
    """A body of thousands of long unknown keys, or a huge prompt_name, gets an error of a few
    hundred characters, not an echo of the body."""
    keys = {f"{'k' * 1000}{i}": 1 for i in range(2000)}
    response = await client.post("/v1/embeddings", json={"input": "x", **keys})
    message = response.json()["error"]["message"]
    assert response.status_code == 400 and "unknown field `kkkk" in message
    assert len(message) < 2000, len(message)
    response = await client.post("/v1/embeddings", json={"input": "x", "prompt_name": "p" * 10**5})
    message = response.json()["error"]["message"]
    assert response.status_code == 400 and "(100000 characters)" in message, message
    assert len(message) < 1000
