"""The embedding task: texts or token ids in, one vector each out (normalized, sliced)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from poolserve.tasks.base import ServeContext
from poolserve.tasks.inputs import InputsTask, l2_normalize

EmbedInputs = list[str] | list[list[int]]


@dataclass(frozen=True)
class EmbedRequest:
    """An embedding request as the engine sees it (validated at the edge)."""

    inputs: EmbedInputs


class EmbedTask(InputsTask[EmbedRequest]):
    """Task processor for `/v1/embeddings` and the offline `embed`: float32 vectors."""

    def postprocess(self, ctx: ServeContext[EmbedRequest], outputs: list[np.ndarray]) -> np.ndarray:
        vectors = np.stack(outputs).astype(np.float32, copy=False)
        params = ctx.pooling_params
        if params.dimensions is not None:
            vectors = vectors[:, : params.dimensions]
        if params.normalize:
            vectors = l2_normalize(vectors)
        return np.ascontiguousarray(vectors)
