"""The classification task: texts in, class probabilities (or raw logits) and a label out."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from poolserve.tasks.base import ServeContext, list_response
from poolserve.tasks.inputs import InputsTask


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


class ClassifyTask(InputsTask[ClassifyRequest]):
    """Task processor for `/classify`: one label and the class probabilities per input."""

    head = "classify"

    def __init__(self, *, max_model_len: int, classifier: ClassifierHead) -> None:
        super().__init__(max_model_len=max_model_len)
        self.classifier = classifier

    def postprocess(
        self, ctx: ServeContext[ClassifyRequest], outputs: list[np.ndarray]
    ) -> np.ndarray:
        logits = np.stack(outputs)
        return self.classifier.activate(logits) if ctx.pooling_params.use_activation else logits

    def build_response(self, ctx: ServeContext[ClassifyRequest], result: np.ndarray) -> bytes:
        labels = self.classifier.labels
        data = [
            {
                "index": index,
                "label": labels[int(np.argmax(row))] if len(labels) == len(row) else None,
                "probs": row.astype(np.float32),
                "num_classes": len(row),
            }
            for index, row in enumerate(result)
        ]
        return list_response(ctx, "classify", data)
