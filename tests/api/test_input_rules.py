"""The rules every text input meets, the same from HTTP and from Python.

- A blank input (empty, or only whitespace) has nothing to embed: 400 / InvalidRequestError
  naming it, on every route and method that takes texts.
- A long input is judged by its tokens, never by its characters: a text of 20,000 spaces between
  two words is four tokens and is embedded whole; with truncation it keeps every token that fits.
"""

from __future__ import annotations

from typing import Any

import httpx
import numpy as np
import pytest

from poolserve.errors import InputTooLongError, InvalidRequestError
from tests.api.helpers import assert_openai_error, post_ok
from tests.reference import BLANK, FP32_COSINE, assert_close_vectors, st_encode, text_with_tokens

pytestmark = pytest.mark.anyio

SPACED = "hello" + " " * 20000 + "world"


@pytest.mark.parametrize("blank", BLANK, ids=repr)
async def test_a_blank_input_is_refused_over_http(client: httpx.AsyncClient, blank: str) -> None:
    error = assert_openai_error(
        await client.post("/v1/embeddings", json={"input": ["fine", blank]}), 400
    )
    assert error["message"].startswith("input 1 is "), error
    assert error["param"] == "input"
    error = assert_openai_error(await client.post("/pooling", json={"input": blank}), 400)
    assert error["message"].startswith("input 0 is ")
    rerank = {"query": "bread", "documents": ["dough", blank]}
    error = assert_openai_error(await client.post("/rerank", json=rerank), 400)
    assert error["message"].startswith("documents[1] is ")
    error = assert_openai_error(
        await client.post("/rerank", json={"query": blank, "documents": ["dough"]}), 400
    )
    assert error["message"].startswith("query is "), error
    assert error["param"] == "query"


@pytest.mark.parametrize("blank", BLANK, ids=repr)
def test_a_blank_input_is_refused_in_python(engine: Any, blank: str) -> None:
    with pytest.raises(InvalidRequestError, match=r"^input 1 is "):
        engine.embed(["fine", blank])
    with pytest.raises(ValueError, match=r"^input 0 is "):  # a ValueError, as Python expects
        engine.embed(blank)
    with pytest.raises(InvalidRequestError, match=r"^documents\[0\] is "):
        engine.score("bread", [blank])
    with pytest.raises(InvalidRequestError, match=r"^queries\[0\] is "):
        engine.score(blank, ["dough"])


async def test_whitespace_around_text_counts_as_text(
    client: httpx.AsyncClient, engine: Any, st_model: Any
) -> None:
    texts = [" leading", "trailing\n", "\t both \t"]
    body = await post_ok(client, "/v1/embeddings", {"input": texts})
    vectors = np.array([item["embedding"] for item in body["data"]], dtype=np.float32)
    reference = st_encode(st_model, texts)
    assert_close_vectors(vectors, reference, FP32_COSINE)
    assert_close_vectors(engine.embed(texts), reference, FP32_COSINE)


async def test_a_long_run_of_spaces_is_not_refused_or_cut(
    client: httpx.AsyncClient, engine: Any, st_model: Any
) -> None:
    reference = st_encode(st_model, [SPACED])
    for body in ({"input": SPACED}, {"input": SPACED, "truncate_prompt_tokens": -1}):
        result = await post_ok(client, "/v1/embeddings", body)
        assert result["usage"]["prompt_tokens"] == 4  # [CLS] hello world [SEP]
        assert_close_vectors(np.array([result["data"][0]["embedding"]]), reference)
    assert_close_vectors(engine.embed(SPACED, truncate_prompt_tokens=-1), reference)
    # "world" counts in a score too: the text is not the same as "hello" alone.
    hello, spaced = engine.score("hello world", ["hello", SPACED])
    assert spaced > hello


async def test_a_long_text_is_judged_by_its_tokens_from_a_bounded_prefix(
    client: httpx.AsyncClient, engine: Any, hf_tokenizer: Any, st_model: Any
) -> None:
    """An input far longer than the model takes is refused without tokenizing all of it, and
    with truncation keeps exactly the tokens the whole text would have kept."""
    long = text_with_tokens(hf_tokenizer, 5000, seed=9)
    assert len(long) > 256 * 64
    error = assert_openai_error(await client.post("/v1/embeddings", json={"input": long}), 400)
    assert error["message"].startswith("input 0 has more than 256 tokens"), error
    with pytest.raises(InputTooLongError, match="more than 256 tokens"):
        engine.embed(long)
    cut = await post_ok(client, "/v1/embeddings", {"input": long, "truncate_prompt_tokens": -1})
    assert cut["usage"]["prompt_tokens"] == 256
    reference = st_encode(st_model, [long])  # sentence-transformers cuts at 256 tokens
    assert_close_vectors(np.array([cut["data"][0]["embedding"]]), reference)
