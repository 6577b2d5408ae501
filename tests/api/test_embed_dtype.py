"""`embed_dtype` on /v1/embeddings (vLLM's option, with int8 and binary as on the Cohere
routes): every type as numbers and as base64 bytes in either byte order, against numpy's own
conversions of the float32 vectors."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator

import httpx
import numpy as np
import pytest

from poolserve import Engine
from tests.api.helpers import post_ok, serving

pytestmark = pytest.mark.anyio

TEXTS = ["The quick brown fox", "Serving embeddings well"]


@pytest.fixture
async def client(engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    async with serving(engine) as http:
        yield http


async def embeddings(client: httpx.AsyncClient, **options: str) -> list[object]:
    body = await post_ok(client, "/v1/embeddings", {"input": TEXTS, **options})
    return [item["embedding"] for item in body["data"]]


def decoded(values: list[object], dtype: str) -> np.ndarray:
    return np.stack([np.frombuffer(base64.b64decode(str(value)), dtype) for value in values])


def assert_rounded_to_half(got: np.ndarray, exact: np.ndarray) -> None:
    """`got` is `exact` rounded to float16, give or take the one float16 step that float32
    noise between two requests can move a value across (the same input may run in another
    batch layout or on another runner, docs/performance.md, "Results across batches")."""
    half = exact.astype(np.float16)
    step = np.spacing(np.abs(half)).astype(np.float32)
    assert got.dtype == np.float16
    assert np.all(np.abs(got.astype(np.float32) - half.astype(np.float32)) <= step)
    assert np.mean(got == half) > 0.99


async def test_float16_and_bfloat16(client: httpx.AsyncClient) -> None:
    exact = np.array(await embeddings(client), dtype=np.float32)
    as_list = np.array(await embeddings(client, embed_dtype="float16"), dtype=np.float32)
    assert_rounded_to_half(as_list.astype(np.float16), exact)
    np.testing.assert_array_equal(as_list, as_list.astype(np.float16))  # float16 values
    for endianness, order in (("little", "<"), ("big", ">")):
        as_base64 = await embeddings(
            client, embed_dtype="float16", encoding_format="base64", endianness=endianness
        )
        assert_rounded_to_half(decoded(as_base64, f"{order}f2").astype(np.float16), exact)
    bits = decoded(
        await embeddings(client, embed_dtype="bfloat16", encoding_format="base64"), "<u2"
    )
    widened = (bits.astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_allclose(widened, exact, rtol=2**-8)  # bfloat16 keeps 8 bits
    as_numbers = np.array(await embeddings(client, embed_dtype="bfloat16"), dtype=np.float32)
    np.testing.assert_array_equal(as_numbers, widened)


async def test_int8_and_binary_match_the_cohere_route(client: httpx.AsyncClient) -> None:
    cohere = await post_ok(
        client, "/v2/embed", {"texts": TEXTS, "embedding_types": ["int8", "ubinary", "binary"]}
    )
    int8 = await embeddings(client, embed_dtype="int8")
    np.testing.assert_array_equal(int8, cohere["embeddings"]["int8"])
    packed = decoded(
        await embeddings(client, embed_dtype="ubinary", encoding_format="base64"), "u1"
    )
    np.testing.assert_array_equal(packed, cohere["embeddings"]["ubinary"])
    signed = decoded(await embeddings(client, embed_dtype="binary", encoding_format="base64"), "i1")
    np.testing.assert_array_equal(signed, cohere["embeddings"]["binary"])
    uint8 = await embeddings(client, embed_dtype="uint8")
    np.testing.assert_array_equal(np.array(uint8), np.array(int8) + 128)
