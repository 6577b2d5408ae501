"""Chat-style inputs on `/v1/embeddings` (vLLM's `messages`): a conversation rendered with the
model's chat template (as transformers' `apply_chat_template` renders it) and embedded as that
text, against sentence-transformers on a tiny Qwen3-Embedding in its real layout; a model
without a template, and a template's own refusal, are 400s."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import torch

from poolserve import Engine
from tests.api.helpers import assert_openai_error, embed, load_engine, serving, vectors
from tests.model_zoo import make_qwen3_embedding_0_6b, sentence_transformer
from tests.reference import assert_close_vectors

pytestmark = pytest.mark.anyio

CONVERSATION = [
    {"role": "system", "content": "Represent the user's question for retrieving answers."},
    {"role": "user", "content": "How does asyncio schedule callbacks?"},
]


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_qwen3_embedding_0_6b(tmp_path_factory.mktemp("zoo") / "Qwen3-Embedding-0.6B")


@pytest.fixture(scope="module")
def qwen(qwen_dir: Path) -> Iterator[Engine]:
    with load_engine(qwen_dir) as engine:
        yield engine


@pytest.fixture
async def qwen_client(qwen: Engine) -> AsyncIterator[httpx.AsyncClient]:
    async with serving(qwen) as client:
        yield client


def st_vectors(st_model: Any, ids: list[int]) -> np.ndarray:
    """sentence-transformers' modules over exactly these token ids."""
    tensor = torch.tensor([ids])
    with torch.no_grad():
        features = st_model({"input_ids": tensor, "attention_mask": torch.ones_like(tensor)})
    result: np.ndarray = features["sentence_embedding"].numpy()
    return result


async def test_messages_are_embedded_as_the_chat_template_renders_them(
    qwen_client: httpx.AsyncClient, qwen_dir: Path
) -> None:
    st_model = sentence_transformer(qwen_dir)
    tokenizer = st_model.tokenizer
    for options in ({}, {"add_generation_prompt": True}):
        rendered = tokenizer.apply_chat_template(CONVERSATION, tokenize=False, **options)
        assert rendered.startswith("<|im_start|>system\n")
        # vLLM's default: the template writes the special tokens, the tokenizer adds none.
        body = await embed(qwen_client, messages=CONVERSATION, **options)
        ids = tokenizer(rendered, add_special_tokens=False)["input_ids"]
        assert body["usage"]["prompt_tokens"] == len(ids)
        assert_close_vectors(vectors(body), st_vectors(st_model, ids))
        # With the tokenizer's own (Qwen3-Embedding appends <|endoftext|>, where it pools):
        # the rendered text as sentence-transformers encodes it.
        body = await embed(qwen_client, messages=CONVERSATION, add_special_tokens=True, **options)
        expected = st_model.encode([rendered], convert_to_numpy=True, normalize_embeddings=True)
        assert_close_vectors(vectors(body), expected)
    # Content as text parts reads as the parts joined by new lines.
    parts = [{"type": "text", "text": "How does asyncio"}, {"type": "text", "text": "schedule?"}]
    joined = await embed(qwen_client, messages=[{"role": "user", "content": parts}])
    text = [{"role": "user", "content": "How does asyncio\nschedule?"}]
    np.testing.assert_allclose(vectors(joined), vectors(await embed(qwen_client, messages=text)))


async def test_chat_inputs_that_cannot_work_are_400s(
    qwen_client: httpx.AsyncClient, client: httpx.AsyncClient
) -> None:
    response = await client.post("/v1/embeddings", json={"messages": CONVERSATION})
    assert "no chat template" in assert_openai_error(response, 400)["message"]
    response = await qwen_client.post("/v1/embeddings", json={"messages": []})
    assert assert_openai_error(response, 400)["param"] == "messages"
    body = {"messages": CONVERSATION, "prompt": "query: "}
    response = await qwen_client.post("/v1/embeddings", json=body)
    assert (
        "put the instruction in the conversation" in assert_openai_error(response, 400)["message"]
    )
    body = {"messages": [{"role": "user", "content": "hi", "tool_calls": []}]}
    assert_openai_error(await qwen_client.post("/v1/embeddings", json=body), 400)
