"""The classification task: texts in, class probabilities (or raw logits) and a label out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import orjson

from poolserve.engine.tokenizer import TextTokenizer, TokenizedText
from poolserve.tasks.base import ServeContext
from poolserve.tasks.inputs import Inputs, tokenize_inputs


@dataclass(frozen=True)
class ClassifyRequest:
    inputs: list[str] | list[list[int]]


@dataclass(frozen=True)
class ClassifierHead:
    """How a classifier's logits become probabilities and labels."""

    labels: tuple[str, ...]
    # Multi-label models score each label on its own (sigmoid), others softmax over labels.
    multi_label: bool = False

    def activate(self, logits: np.ndarray) -> np.ndarray:
        logits = logits.astype(np.float64)
        if self.multi_label or logits.shape[-1] == 1:
            sigmoid: np.ndarray = 1.0 / (1.0 + np.exp(-logits))
            return sigmoid
        shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
        probs: np.ndarray = shifted / shifted.sum(axis=-1, keepdims=True)
        return probs


class ClassifyTask:
    """Task processor for `/classify`: one label and the class probabilities per input."""

    def __init__(self, *, max_model_len: int, head: ClassifierHead) -> None:
        self.max_model_len = max_model_len
        self.head = head

    def inputs(self, ctx: ServeContext[ClassifyRequest]) -> Inputs:
        return ctx.request.inputs

    def preprocess(
        self,
        ctx: ServeContext[ClassifyRequest],
        tokenizer: TextTokenizer,
        start: int,
        inputs: Sequence[str] | Sequence[list[int]],
    ) -> list[TokenizedText]:
        return tokenize_inputs(
            tokenizer,
            inputs,
            start,
            truncate=ctx.pooling_params.truncate_prompt_tokens,
            max_model_len=self.max_model_len,
            head="classify",
        )

    def postprocess(
        self, ctx: ServeContext[ClassifyRequest], outputs: list[np.ndarray]
    ) -> np.ndarray:
        logits = np.stack(outputs)
        return self.head.activate(logits) if ctx.pooling_params.use_activation else logits

    def build_response(self, ctx: ServeContext[ClassifyRequest], result: np.ndarray) -> bytes:
        labels = self.head.labels
        data = [
            {
                "index": index,
                "label": labels[int(np.argmax(row))] if len(labels) == len(row) else None,
                "probs": row.astype(np.float32),
                "num_classes": len(row),
            }
            for index, row in enumerate(result)
        ]
        return orjson.dumps(
            {
                "id": f"classify-{ctx.request_id}",
                "object": "list",
                "created": ctx.timings.created,
                "model": ctx.model_name,
                "data": data,
                "usage": {"prompt_tokens": ctx.prompt_tokens, "total_tokens": ctx.prompt_tokens},
            },
            option=orjson.OPT_SERIALIZE_NUMPY,
        )
