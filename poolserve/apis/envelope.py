"""What the API families' answers share: OpenAI's list envelope (vLLM's shapes use it too),
its usage, and base64 of float32 vectors."""

from __future__ import annotations

import base64
from typing import Any, Literal

import numpy as np
import orjson

from poolserve.engine.context import ServeContext

EncodingFormat = Literal["float", "base64"]


def usage(ctx: ServeContext[Any]) -> dict[str, int]:
    return {"prompt_tokens": ctx.prompt_tokens, "total_tokens": ctx.prompt_tokens}


def list_body(ctx: ServeContext[Any], id_prefix: str, data: list[Any]) -> bytes:
    """The list envelope around `data`, with the vectors' `embedding_space` where it has
    vectors; numpy arrays serialize natively."""
    body = {
        "id": f"{id_prefix}-{ctx.request_id}",
        "object": "list",
        "created": ctx.timings.created,
        "model": ctx.model_name,
        "data": data,
        "usage": usage(ctx),
        **embedding_space_field(ctx),
    }
    return orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY)


def embedding_space_field(ctx: ServeContext[Any]) -> dict[str, str]:
    """`{"embedding_space": ...}` for a body of one type of vectors, else nothing."""
    spaces = list(ctx.embedding_spaces.values())
    return {"embedding_space": spaces[0]} if len(spaces) == 1 else {}


def base64_float32(array: np.ndarray) -> str:
    """What OpenAI clients decode: little-endian float32 bytes, row-major, base64."""
    return base64.b64encode(np.ascontiguousarray(array, dtype="<f4").tobytes()).decode("ascii")
