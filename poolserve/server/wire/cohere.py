"""Cohere's embed shapes (`/v2/embed`, `/v1/embed`): embeddings by type, `texts`, `meta`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import orjson

from poolserve.server.wire.openai import base64_float32
from poolserve.tasks.base import ServeContext
from poolserve.tasks.quantize import COMPACT_TYPES, quantize

EmbeddingType = Literal["float", "int8", "uint8", "binary", "ubinary", "base64"]
Version = Literal["1", "2"]


def _typed(vectors: np.ndarray, kind: EmbeddingType) -> Any:
    if kind == "float":
        return vectors
    if kind == "base64":
        return [base64_float32(row) for row in vectors]
    assert kind in COMPACT_TYPES
    return quantize(vectors, kind)


def embed_body(
    ctx: ServeContext[Any],
    vectors: np.ndarray,
    *,
    texts: list[str],
    embedding_types: Sequence[EmbeddingType] | None,
    version: Version,
) -> bytes:
    """By type (`{"float": [...], "int8": [...]}`) in v2, or in v1 when types are asked for;
    a plain list of float vectors in v1 otherwise, as Cohere answers."""
    if version == "1" and embedding_types is None:
        embeddings: Any = vectors
        response_type = "embeddings_floats"
    else:
        kinds: list[EmbeddingType] = list(dict.fromkeys(embedding_types or ["float"]))
        embeddings = {kind: _typed(vectors, kind) for kind in kinds}
        response_type = "embeddings_by_type"
    return orjson.dumps(
        {
            "id": ctx.request_id,
            "embeddings": embeddings,
            "texts": texts,
            "meta": {
                "api_version": {"version": version},
                "billed_units": {"input_tokens": ctx.prompt_tokens},
            },
            "response_type": response_type,
        },
        option=orjson.OPT_SERIALIZE_NUMPY,
    )
