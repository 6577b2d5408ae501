"""The classification task: texts in, class probabilities (or raw logits) and a label out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from poolserve.engine.context import ServeContext
from poolserve.tasks.input_steps import InputsTask


@dataclass(frozen=True)
class ClassifyRequest:
    inputs: list[str] | list[list[int]]


Activation = Literal["sigmoid", "softmax", "identity"]


@dataclass(frozen=True)
class ClassifierHead:
    """How a classifier's (or cross-encoder's) logits become scores, and their labels. The one
    place that applies the model's activation: `/classify`, `/pooling` and `/score` agree."""

    labels: tuple[str, ...]
    # Decided once from the model's config (tasks/task_set.py): sigmoid for multi-label and
    # one-label models unless configured otherwise, softmax over the labels for the rest.
    activation: Activation = "softmax"

    def activate(self, logits: np.ndarray) -> np.ndarray:
        logits = logits.astype(np.float64)
        if self.activation == "identity":
            return logits
        if self.activation == "sigmoid":
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
