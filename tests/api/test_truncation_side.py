"""Truncation from either end: `truncation_side: "left"` keeps a text's last tokens (special
tokens kept), as a Hugging Face tokenizer with truncation_side="left" does, for short cuts,
for texts longer than the bounded prefix poolserve reads, and for token-id inputs; a prompt
before the text is never cut."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from poolserve import Engine
from tests.api.helpers import embed, load_engine, serving, vectors
from tests.reference import FP32_COSINE, WORDS, assert_close_vectors
from tests.tiny_models import make_prompted_embedding

pytestmark = pytest.mark.anyio

TEXT = " ".join(WORDS[:40])
# Longer than the 64 characters per model token poolserve reads before deciding (256 tokens).
HUGE = " ".join(f"{WORDS[i % len(WORDS)]}{i}" for i in range(6000))


@pytest.fixture(scope="module")
def left_st(model_path: Path) -> Iterator[Any]:
    """A sentence-transformers model of its own whose tokenizer truncates on the left."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(model_path), device="cpu")
    model.tokenizer.truncation_side = "left"
    yield model


@pytest.fixture
async def client(engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    async with serving(engine) as http:
        yield http


@pytest.mark.parametrize(("text", "tokens"), [(TEXT, 8), (TEXT, 20), (HUGE, -1)])
async def test_left_truncation_keeps_the_last_tokens(
    client: httpx.AsyncClient, left_st: Any, text: str, tokens: int
) -> None:
    body = await embed(client, input=[text], truncate_prompt_tokens=tokens, truncation_side="left")
    left_st.max_seq_length = 256 if tokens == -1 else tokens
    assert_close_vectors(vectors(body), left_st.encode([text]), FP32_COSINE)
    right = await embed(client, input=[text], truncate_prompt_tokens=tokens)
    assert body["usage"] == right["usage"]  # the same count, from the other end
    assert (vectors(body) * vectors(right)).sum() < 0.99


async def test_left_truncation_of_token_ids(client: httpx.AsyncClient, engine: Engine) -> None:
    ids = engine.tokenize(TEXT)
    assert isinstance(ids[0], int)
    body = await embed(client, input=[ids], truncate_prompt_tokens=10, truncation_side="left")
    expected = await embed(client, input=[ids[-10:]])
    assert_close_vectors(vectors(body), vectors(expected))


async def test_an_unknown_side_is_400(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/embeddings", json={"input": "a", "truncation_side": "middle"})
    assert response.status_code == 400
    assert "truncation_side" in response.json()["error"]["message"]


async def test_left_truncation_cuts_the_text_and_keeps_the_prompt(tmp_path: Path) -> None:
    """A model whose default prompt ("passage: ") goes before each text: cutting from the left
    drops the text's first tokens, never the prompt's."""
    with load_engine(make_prompted_embedding(tmp_path / "prompted")) as engine:
        prompt = engine.prompts["document"]
        cls, *prompt_ids, sep = engine.tokenize(prompt)
        text_ids = engine.tokenize(TEXT, add_special_tokens=False)
        limit = 16
        kept = [cls, *prompt_ids, *text_ids[-(limit - 2 - len(prompt_ids)) :], sep]
        async with serving(engine) as http:
            body = await embed(
                http, input=[TEXT], truncate_prompt_tokens=limit, truncation_side="left"
            )
            expected = await embed(http, input=[kept])
            prompt_cut = await embed(http, input=[[cls, *text_ids[-(limit - 2) :], sep]])
    assert body["usage"]["prompt_tokens"] == limit
    assert_close_vectors(vectors(body), vectors(expected))
    assert (vectors(body) * vectors(prompt_cut)).sum() < 0.999
