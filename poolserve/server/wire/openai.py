"""OpenAI's shapes: the list envelope (vLLM uses it too) and `/v1/embeddings`."""

from __future__ import annotations

import base64
from typing import Any, Literal

import numpy as np
import orjson

from poolserve.tasks.base import ServeContext
from poolserve.tasks.quantize import EmbedDType, as_dtype, as_floats

EncodingFormat = Literal["float", "base64"]
Endianness = Literal["little", "big"]


def usage(ctx: ServeContext[Any]) -> dict[str, int]:
    return {"prompt_tokens": ctx.prompt_tokens, "total_tokens": ctx.prompt_tokens}


def list_body(ctx: ServeContext[Any], id_prefix: str, data: list[Any]) -> bytes:
    """The list envelope around `data`; numpy arrays serialize natively."""
    return orjson.dumps(
        {
            "id": f"{id_prefix}-{ctx.request_id}",
            "object": "list",
            "created": ctx.timings.created,
            "model": ctx.model_name,
            "data": data,
            "usage": usage(ctx),
        },
        option=orjson.OPT_SERIALIZE_NUMPY,
    )


def base64_float32(array: np.ndarray) -> str:
    """What OpenAI clients decode: little-endian float32 bytes, row-major, base64."""
    return base64.b64encode(np.ascontiguousarray(array, dtype="<f4").tobytes()).decode("ascii")


def embeddings_body(
    ctx: ServeContext[Any],
    vectors: np.ndarray,
    *,
    encoding_format: EncodingFormat,
    embed_dtype: EmbedDType = "float32",
    endianness: Endianness = "little",
) -> bytes:
    """Each vector as numbers, or as base64 of its bytes in `embed_dtype` (vLLM's option;
    the OpenAI client decodes float32 only, see the README)."""
    typed = as_dtype(vectors, embed_dtype)
    embeddings: list[object]
    if encoding_format == "base64":
        raw = typed.astype(typed.dtype.newbyteorder(endianness), copy=False)
        embeddings = [base64.b64encode(np.ascontiguousarray(row).tobytes()).decode() for row in raw]
    else:
        numbers = as_floats(typed, embed_dtype)
        if embed_dtype in ("float16", "bfloat16"):
            # As float64, JSON holds each value exactly (float32's shortest form would not).
            numbers = numbers.astype(np.float64)
        embeddings = list(numbers)
    data = [
        {"object": "embedding", "index": index, "embedding": embedding}
        for index, embedding in enumerate(embeddings)
    ]
    return list_body(ctx, "embd", data)
