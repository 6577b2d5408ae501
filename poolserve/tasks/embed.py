"""The embedding task: texts or token ids in, one vector each out (normalized, sliced)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from poolserve.tasks.base import ServeContext, list_response
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
        data = [
            {"object": "embedding", "index": index, "embedding": embedding}
            for index, embedding in enumerate(embeddings)
        ]
        return list_response(ctx, "embd", data)
