"""The raw pooling task (`/pooling`, `/embed_sparse`): any head the model has, output per input.

- embed: the pooled vector (normalized unless `normalize: false`);
- token_embed: one vector per token (each normalized unless `normalize: false`);
- classify: class probabilities (raw logits with `use_activation: false`);
- token_classify: per-token probabilities and labels;
- sparse (SPLADE): the non-zero vocabulary weights as `{index, value}`, by index.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from poolserve.engine.context import ServeContext
from poolserve.models.kinds import Head
from poolserve.tasks.classify import ClassifierHead
from poolserve.tasks.input_steps import InputsTask, l2_normalize


@dataclass(frozen=True)
class PoolingRequest:
    inputs: list[str] | list[list[int]]
    head: Head


def sparse_entries(weights: np.ndarray) -> list[dict[str, Any]]:
    """Non-zero weights of a vocabulary-sized vector as `{index, value}`, by index."""
    indices = np.flatnonzero(weights > 0)
    return [{"index": int(i), "value": float(weights[i])} for i in indices]


class PoolingTask(InputsTask[PoolingRequest]):
    """Task processor for `/pooling` and `/embed_sparse`: any head, raw output per input."""

    def __init__(
        self,
        *,
        max_model_len: int,
        classifier: ClassifierHead | None,
        first_token_row: int = 0,
    ) -> None:
        super().__init__(max_model_len=max_model_len)
        self.classifier = classifier
        # token_embed rows before this one are not the model's token vectors (BGE-M3: [CLS]).
        self.first_token_row = first_token_row

    def head_for(self, ctx: ServeContext[PoolingRequest]) -> Head:
        return ctx.request.head

    def postprocess(
        self, ctx: ServeContext[PoolingRequest], outputs: list[np.ndarray]
    ) -> list[Any]:
        head = ctx.request.head
        params = ctx.pooling_params
        if head == "token_embed" and self.first_token_row:
            outputs = [output[self.first_token_row :] for output in outputs]
        if head in ("embed", "token_embed"):
            return [l2_normalize(output) if params.normalize else output for output in outputs]
        if head in ("classify", "token_classify"):
            if self.classifier is None or not params.use_activation:
                return list(outputs)
            return [self.classifier.activate(output) for output in outputs]
        return [sparse_entries(output) for output in outputs]
