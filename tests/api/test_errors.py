"""Every client mistake is a 4xx in the OpenAI error shape, with a message that says what to fix.

Never a 500, never a traceback in the body.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.api.helpers import assert_openai_error
from tests.reference import MODEL_ID, text_with_tokens

pytestmark = pytest.mark.anyio


def long_text(tokenizer: Any, n: int = 300) -> str:
    return text_with_tokens(tokenizer, n, seed=n)


BAD_BODIES: list[tuple[str, Any, list[str], str | None]] = [
    # (case id, JSON body, words the message must contain, param)
    ("empty string", {"input": ""}, ["input 0 is empty"], "input"),
    ("empty list", {"input": []}, ["empty list"], "input"),
    ("list with empty string", {"input": ["ok", ""]}, ["input 1 is empty"], "input"),
    ("whitespace only", {"input": ["ok", " \t\n"]}, ["input 1 is only whitespace"], "input"),
    ("list with empty id list", {"input": [[101, 102], []]}, ["item 1", "empty"], "input"),
    (
        "bad encoding_format",
        {"input": "x", "encoding_format": "binary"},
        ["float", "base64"],
        "encoding_format",
    ),
    ("dimensions 0", {"input": "x", "dimensions": 0}, ["dimensions", "384", "0"], "dimensions"),
    ("dimensions 385", {"input": "x", "dimensions": 385}, ["dimensions", "385"], "dimensions"),
    ("dimensions negative", {"input": "x", "dimensions": -5}, ["dimensions", "-5"], "dimensions"),
    ("dimensions string", {"input": "x", "dimensions": "128"}, ["dimensions"], "dimensions"),
    (
        "truncate 257",
        {"input": "x", "truncate_prompt_tokens": 257},
        ["257", "256"],
        "truncate_prompt_tokens",
    ),
    (
        "truncate 1",
        {"input": "x", "truncate_prompt_tokens": 1},
        ["truncate_prompt_tokens"],
        "truncate_prompt_tokens",
    ),
    (
        "truncate -2",
        {"input": "x", "truncate_prompt_tokens": -2},
        ["truncate_prompt_tokens"],
        "truncate_prompt_tokens",
    ),
    ("input number", {"input": 42}, ["input"], "input"),
    ("input float", {"input": 4.2}, ["input"], "input"),
    ("input dict", {"input": {"text": "x"}}, ["input"], "input"),
    ("input null", {"input": None}, ["input"], "input"),
    ("input bool", {"input": True}, ["input"], "input"),
    ("mixed list", {"input": ["a", 1]}, ["input"], "input"),
    ("bools as ids", {"input": [True, False]}, ["input"], "input"),
    ("missing input", {"model": MODEL_ID}, ["input"], "input"),
    ("body is a list", ["x"], [], None),
    ("body is a string", "x", [], None),
    ("id out of vocab", {"input": [101, 999999, 102]}, ["999999", "30521"], "input"),
    ("negative id", {"input": [[101, -1, 102]]}, ["-1", "vocabulary"], "input"),
    ("id = vocab size", {"input": [[101, 30522, 102]]}, ["30522"], "input"),
]


@pytest.mark.parametrize(
    ("body", "words", "param"),
    [case[1:] for case in BAD_BODIES],
    ids=[case[0] for case in BAD_BODIES],
)
async def test_bad_bodies_are_400(
    client: httpx.AsyncClient, body: Any, words: list[str], param: str | None
) -> None:
    error = assert_openai_error(await client.post("/v1/embeddings", json=body), 400)
    assert error["type"] == "invalid_request_error"
    for word in words:
        assert word in error["message"]
    if param is not None:
        assert error["param"] == param


@pytest.mark.parametrize("raw", [b'{"input": "a",', b"{input: 'a'}", b"not json", b"\xff\xfe"])
async def test_malformed_json_is_400(client: httpx.AsyncClient, raw: bytes) -> None:
    response = await client.post(
        "/v1/embeddings", content=raw, headers={"content-type": "application/json"}
    )
    error = assert_openai_error(response, 400)
    assert "JSON" in error["message"]


async def test_missing_body_is_400(client: httpx.AsyncClient) -> None:
    error = assert_openai_error(await client.post("/v1/embeddings"), 400)
    assert "no body" in error["message"]


async def test_unknown_model_is_404_naming_the_served_model(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/embeddings", json={"input": "x", "model": "gpt-nope"})
    error = assert_openai_error(response, 404)
    assert error["type"] == "not_found_error"
    assert error["param"] == "model"
    assert "gpt-nope" in error["message"]
    assert MODEL_ID in error["message"]


async def test_input_over_the_limit_without_truncation(
    client: httpx.AsyncClient, hf_tokenizer: Any
) -> None:
    response = await client.post("/v1/embeddings", json={"input": long_text(hf_tokenizer)})
    error = assert_openai_error(response, 400)
    for word in ("300", "256", "truncate_prompt_tokens"):
        assert word in error["message"]
    assert error["param"] == "input"


async def test_257_tokens_is_refused_256_accepted(
    client: httpx.AsyncClient, hf_tokenizer: Any
) -> None:
    refused = await client.post("/v1/embeddings", json={"input": long_text(hf_tokenizer, 257)})
    assert "257" in assert_openai_error(refused, 400)["message"]
    accepted = await client.post("/v1/embeddings", json={"input": long_text(hf_tokenizer, 256)})
    assert accepted.status_code == 200
    assert accepted.json()["usage"]["prompt_tokens"] == 256


async def test_token_ids_over_the_limit_without_truncation(client: httpx.AsyncClient) -> None:
    ids = [101] + [2000] * 298 + [102]
    error = assert_openai_error(await client.post("/v1/embeddings", json={"input": ids}), 400)
    assert "300" in error["message"]
    assert "256" in error["message"]


async def test_the_error_names_the_long_input_in_a_later_chunk(
    client: httpx.AsyncClient, hf_tokenizer: Any
) -> None:
    """Inputs are tokenized in chunks of 64; the index must be the one in the request."""
    inputs = ["short"] * 69 + [long_text(hf_tokenizer)]
    error = assert_openai_error(await client.post("/v1/embeddings", json={"input": inputs}), 400)
    assert "input 69 has 300 tokens" in error["message"]
    # The engine is still fine afterwards (the first chunk's work was dropped or finished).
    assert (await client.post("/v1/embeddings", json={"input": "after"})).status_code == 200


async def test_tokenize_and_detokenize_errors(client: httpx.AsyncClient) -> None:
    assert_openai_error(await client.post("/tokenize", json={}), 400)
    assert_openai_error(await client.post("/tokenize", json={"prompt": 5}), 400)
    error = assert_openai_error(
        await client.post("/tokenize", json={"prompt": "x", "model": "nope"}), 404
    )
    assert MODEL_ID in error["message"]
    error = assert_openai_error(await client.post("/detokenize", json={"tokens": [99999]}), 400)
    assert "99999" in error["message"]
    assert_openai_error(await client.post("/detokenize", json={"tokens": "abc"}), 400)


async def test_unknown_route_and_wrong_method(client: httpx.AsyncClient) -> None:
    assert_openai_error(await client.get("/v1/nothing-here"), 404)
    error = assert_openai_error(await client.get("/v1/embeddings"), 405)
    assert error["message"] == "GET /v1/embeddings: this route takes POST, with a JSON body"


JSON = {"content-type": "application/json"}
SENT_WRONG: list[tuple[str, dict[str, Any], str]] = [
    # (case id, what httpx sends to POST /v1/embeddings (or the path given), in the message)
    (
        "Latin-1 text",
        {"content": '{"input": "café"}'.encode("latin-1"), "headers": JSON},
        "the request body is not UTF-8 (byte 0xe9 at position 14); send JSON encoded as UTF-8",
    ),
    (
        "multipart form",
        {"files": {"input": ("a.txt", b"some text")}},
        "the request body is multipart form data; send a JSON object",
    ),
    ("a JSON array", {"json": ["a sentence"]}, "the request body is an array; send a JSON object"),
    # NaN is JSON to pydantic's parser, not to orjson's: a 400 either way, never a 500.
    ("an array with NaN", {"content": b"[NaN]", "headers": JSON}, "the request body is "),
    (
        "messages with input",
        {"json": {"input": "x", "messages": [{"role": "user", "content": "y"}]}},
        "input: a request embeds `input` or `messages` (a conversation), not both",
    ),
    (
        "a fraction among token ids",
        {"json": {"input": [101, 1.5, 102]}},
        "; input[1] is 1.5, not a whole number",
    ),
    (
        "no documents",
        {"json": {"query": "q", "documents": []}, "path": "/rerank"},
        "documents is an empty array; send at least one item",
    ),
]


@pytest.mark.parametrize(
    ("sent", "expected"), [case[1:] for case in SENT_WRONG], ids=[case[0] for case in SENT_WRONG]
)
async def test_an_error_says_what_was_sent_and_what_to_send(
    client: httpx.AsyncClient, sent: dict[str, Any], expected: str
) -> None:
    sent = dict(sent)
    error = assert_openai_error(await client.post(sent.pop("path", "/v1/embeddings"), **sent), 400)
    assert expected in error["message"], error["message"]
    assert "Request" not in error["message"]  # no schema class names


def test_a_body_only_pydantic_reads_is_named_without_parsing_it_again() -> None:
    """A route that validates with pydantic alone (TEI's shapes) reads `[NaN]` as an array."""
    from poolserve.apis.tei.requests import TeiEmbedRequest
    from poolserve.errors import InvalidRequestError
    from poolserve.server.body import validate_body

    for body in (b"[NaN]", b"[1e999]"):
        with pytest.raises(InvalidRequestError, match="the request body is an array"):
            validate_body(TeiEmbedRequest, body)


async def test_a_long_input_is_refused_naming_truncation_and_chunking(
    client: httpx.AsyncClient, hf_tokenizer: Any
) -> None:
    response = await client.post("/v1/embeddings", json={"input": ["a", long_text(hf_tokenizer)]})
    message = assert_openai_error(response, 400)["message"]
    assert message.startswith("input 1 has 300 tokens"), message
    assert "`truncate_prompt_tokens`" in message and '`long_input: "chunk"`' in message
    # Another family's route names its own way to cut, and the server's flag to chunk.
    tei = await client.post("/embed", json={"inputs": ["a", long_text(hf_tokenizer)]})
    assert tei.status_code == 400
    assert "`truncate: true`" in tei.json()["error"]
    assert "--long-input chunk" in tei.json()["error"]


@pytest.mark.parametrize(
    ("path", "body", "expected"),
    [
        (
            "/v1/embeddings",
            {"input": 42},
            "input must be a string, an array of strings, an array of token ids, or an array "
            'of arrays of token ids (an image-text model\'s images as {"image": ...} among the '
            "strings); input is a number",
        ),
        (
            "/rerank",
            {"query": "q", "documents": ["d", {"text": 5}]},
            "documents must be an array of strings or of objects with a `text` string (or, for "
            "an image-text model, an `image`); documents[1].text is a number",
        ),
        (
            "/score",
            {"queries": "q", "documents": [1, 2]},
            "documents must be a string or an array of strings (an image-text model's also "
            '{"content": [parts]}); documents[0] is a number',
        ),
    ],
)
async def test_a_value_of_the_wrong_shape_is_one_sentence(
    client: httpx.AsyncClient, path: str, body: dict[str, Any], expected: str
) -> None:
    """Not one line per union member, and no internal class names."""
    error = assert_openai_error(await client.post(path, json=body), 400)
    assert error["message"] == expected


@pytest.mark.parametrize(
    ("path", "body", "expected"),
    [
        # A client's key that looks like one of pydantic's union member names (capitalised) is
        # still the client's: named, never dropped (the fuzzer found a 500 here).
        ("/v1/embeddings", {"input": "a", "Input": "b"}, "unknown field `Input`"),
        (
            "/similarity",
            {"inputs": {"Dc": "x", "sentences": ["a"]}},
            "inputs.Dc: unknown field",
        ),
    ],
)
async def test_an_unknown_key_is_named_whatever_it_looks_like(
    client: httpx.AsyncClient, path: str, body: dict[str, Any], expected: str
) -> None:
    response = await client.post(path, json=body)
    assert response.status_code == 400, response.text
    assert expected in response.text, response.text
