"""OpenAI's embeddings API (`POST /v1/embeddings`), with vLLM's options (`truncate_prompt_tokens`,
`embed_dtype`, `normalize`, prompts): its request schema, its answer (documented and encoded)
and its endpoint."""

from __future__ import annotations

import base64
from functools import partial
from typing import Any, Literal

import numpy as np
from pydantic import Field, StrictBool, StrictInt, StrictStr

from poolserve.engine.request import ServeContext
from poolserve.server.apis.envelope import EncodingFormat, list_body
from poolserve.server.endpoint import Call, Endpoint, Inputs, Served, embedders
from poolserve.server.protocol import InputRequest
from poolserve.server.schemas import Documented, ListEnvelope
from poolserve.tasks.embed import EmbedRequest
from poolserve.tasks.quantize import EmbedDType, as_dtype, as_floats

Endianness = Literal["little", "big"]


# -- the request ---------------------------------------------------------------------------------


class EmbeddingRequest(InputRequest):
    """OpenAI `POST /v1/embeddings`, plus vLLM's pooling options."""

    encoding_format: Literal["float", "base64"] = "float"
    dimensions: StrictInt | None = None
    normalize: StrictBool | None = None
    prompt_name: StrictStr | None = Field(
        None,
        description="one of the model's prompts (GET /v1/models lists them), put before each "
        "text; default: the model's default prompt",
    )
    prompt: StrictStr | None = Field(
        None, description="a prompt's text, put before each text (instead of prompt_name)"
    )
    embed_dtype: Literal["float32", "float16", "bfloat16", "int8", "uint8", "binary", "ubinary"] = (
        Field(
            "float32",
            description="the numbers' type (README, Compact embedding types); with base64, the "
            "bytes' type (the OpenAI client decodes float32 only)",
        )
    )
    endianness: Literal["little", "big"] = Field(
        "little", description="byte order of base64 values wider than a byte"
    )

    def wants_normalize(self) -> bool | None:
        """`normalize`, or vLLM's `use_activation`; None leaves it to the model's config."""
        return self.normalize if self.normalize is not None else self.use_activation


# -- the answer ----------------------------------------------------------------------------------


class EmbeddingItem(Documented):
    object: Literal["embedding"]
    index: int
    embedding: list[float] | str = Field(
        description="floats, or with encoding_format base64 little-endian float32 bytes"
    )


class EmbeddingResponse(ListEnvelope):
    data: list[EmbeddingItem]


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


# -- the endpoint --------------------------------------------------------------------------------


def _embeddings(call: Call[EmbeddingRequest]) -> Served:
    wire, service = call.wire, call.service
    embed = service.tasks.embed
    assert embed is not None  # model_for chose a model that serves this route
    params = service.pooling_params(
        normalize=wire.wants_normalize(),
        dimensions=wire.dimensions,
        truncate_prompt_tokens=wire.truncate_prompt_tokens,
        truncation_side=wire.truncation_side,
    )
    encode = partial(
        embeddings_body,
        encoding_format=wire.encoding_format,
        embed_dtype=wire.embed_dtype,
        endianness=wire.endianness,
    )
    prompt = service.tasks.prompts.resolve(wire.prompt_name, wire.prompt)
    return Served(embed, EmbedRequest(wire.inputs(), prompt), params, encode, wire.request_timeout)


ENDPOINTS = [
    Endpoint(
        "/v1/embeddings",
        EmbeddingRequest,
        EmbeddingResponse,
        _embeddings,
        Inputs("input", lambda wire: len(wire.inputs())),
        "create_embeddings",
        serves=embedders,
    )
]
