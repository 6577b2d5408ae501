"""The embedding task: texts or token ids in, one vector each out (normalized, sliced)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import orjson

from poolserve.tasks.base import ServeContext
from poolserve.tasks.inputs import InputsTask, base64_float32, l2_normalize

EncodingFormat = Literal["float", "base64"]
EmbedInputs = list[str] | list[list[int]]


@dataclass(frozen=True)
class EmbedRequest:
    """An embedding request as the engine sees it (validated at the edge)."""

    inputs: EmbedInputs
    encoding_format: EncodingFormat = "float"


class EmbedTask(InputsTask[EmbedRequest]):
    """Task processor for `/v1/embeddings` and the offline `embed`."""

    def postprocess(self, ctx: ServeContext[EmbedRequest], outputs: list[np.ndarray]) -> np.ndarray:
        vectors = np.stack(outputs).astype(np.float32, copy=False)
        params = ctx.pooling_params
        if params.dimensions is not None:
            vectors = vectors[:, : params.dimensions]
        if params.normalize:
            vectors = l2_normalize(vectors)
        return np.ascontiguousarray(vectors)

    def build_response(self, ctx: ServeContext[EmbedRequest], result: np.ndarray) -> bytes:
        if ctx.request.encoding_format == "base64":
            embeddings: list[object] = [base64_float32(row) for row in result]
        else:
            embeddings = list(result)
        return orjson.dumps(
            {
                "id": f"embd-{ctx.request_id}",
                "object": "list",
                "created": ctx.timings.created,
                "model": ctx.model_name,
                "data": [
                    {"object": "embedding", "index": index, "embedding": embedding}
                    for index, embedding in enumerate(embeddings)
                ],
                "usage": {"prompt_tokens": ctx.prompt_tokens, "total_tokens": ctx.prompt_tokens},
            },
            option=orjson.OPT_SERIALIZE_NUMPY,
        )
