"""What a model is (embedding, cross-encoder, classifier, ...) and which heads it can run.

A *kind* is detected from the model directory (architecture in config.json, sentence-transformers
modules) or forced with `--task`. A *head* is what one forward pass returns for a batch; requests
of different heads are never batched together.
"""

from __future__ import annotations

from typing import Literal

from poolserve.errors import ModelLoadError
from poolserve.models.layout import ModelLayout

Kind = Literal[
    "embedding", "cross_encoder", "classifier", "late_interaction", "sparse", "token_classifier"
]
Head = Literal["embed", "token_embed", "classify", "token_classify", "sparse"]

KINDS: tuple[Kind, ...] = (
    "embedding",
    "cross_encoder",
    "classifier",
    "late_interaction",
    "sparse",
    "token_classifier",
)


def describe(kind: Kind) -> str:
    """`an embedding model`, `a cross_encoder model`: the kind (as `--task` and the errors
    name it) in a sentence."""
    return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind} model"


# The heads each kind runs; the first is its main one.
HEADS: dict[Kind, tuple[Head, ...]] = {
    "embedding": ("embed", "token_embed"),
    "cross_encoder": ("classify",),
    "classifier": ("classify",),
    "late_interaction": ("token_embed",),
    "sparse": ("sparse",),
    "token_classifier": ("token_classify",),
}

# `--task` (or `ModelConfig.task`) forces a kind, named as the errors and the README name it;
# vLLM's `--task` names are accepted for the kinds they mean without doubt. (`/pooling`'s `task`
# is another thing: the head one request runs, such as `token_embed`, which an embedding model
# also has.)
VLLM_TASK_NAMES: dict[str, Kind] = {
    "embed": "embedding",
    "score": "cross_encoder",
    "classify": "classifier",
}
TASK_OVERRIDES: dict[str, Kind] = {**{kind: kind for kind in KINDS}, **VLLM_TASK_NAMES}
TASK_CHOICES = ("auto", *KINDS)


def detect_kind(layout: ModelLayout, task: str | None = None) -> Kind:
    """The kind of model in `layout`, or the one `task` forces."""
    if task is not None and task != "auto":
        if task not in TASK_OVERRIDES:
            raise ModelLoadError(
                f"unknown task {task!r}: use auto or one of {', '.join(KINDS)} (or vLLM's "
                f"{', '.join(VLLM_TASK_NAMES)})"
            )
        return TASK_OVERRIDES[task]
    architecture = layout.architecture
    if architecture.endswith("ForSequenceClassification"):
        return "cross_encoder" if layout.num_labels == 1 else "classifier"
    if architecture.endswith("ForTokenClassification"):
        return "token_classifier"
    if architecture.endswith("ForMaskedLM") or "SpladePooling" in layout.module_types:
        return "sparse"
    if (
        architecture == "HF_ColBERT"
        or layout.colbert_metadata
        or str(layout.st_config.get("model_type", "")).lower() == "colbert"
        or (layout.dense and "Pooling" not in layout.module_types)
    ):
        # Stanford ColBERT (HF_ColBERT with a `linear` head), or PyLate: a projection applied to
        # every token and no pooling module.
        return "late_interaction"
    return "embedding"
