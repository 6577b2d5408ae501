"""What a model is (embedding, cross-encoder, classifier, ...) and which heads it can run.

A *kind* is detected from the model directory (architecture in config.json, sentence-transformers
modules) or forced with `--task`. A *head* is what one forward pass returns for a batch; requests
of different heads are never batched together.
"""

from __future__ import annotations

from typing import Literal, get_args

# The kinds' names are the `--task` setting's vocabulary, declared with it.
from poolserve.config.model_config import Kind as Kind
from poolserve.errors import ModelLoadError, SettingError
from poolserve.models.layout import ModelLayout

# "m3": BGE-M3's dense, lexical and multi-vector outputs of one forward pass
# (backends/torch_model/module.py); "image_embed": an image-text model's image vectors
# (backends/torch_model/image_text.py).
Head = Literal["embed", "token_embed", "classify", "token_classify", "sparse", "m3", "image_embed"]

# The kinds, as `--task` names them (config/model_config.py declares them).
KINDS: tuple[Kind, ...] = get_args(Kind)


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

# `--task` (or `ModelConfig.task`) forces a kind, named as the errors and the docs name it;
# vLLM's `--task` names are accepted for the kinds they mean without doubt. (`/pooling`'s `task`
# is another thing: the head one request runs, such as `token_embed`, which an embedding model
# also has.)
VLLM_TASK_NAMES: dict[str, Kind] = {
    "embed": "embedding",
    "score": "cross_encoder",
    "classify": "classifier",
}
TASK_OVERRIDES: dict[str, Kind] = {**{kind: kind for kind in KINDS}, **VLLM_TASK_NAMES}


def _sentence_transformers_kind(layout: ModelLayout) -> Kind | None:
    """The kind sentence-transformers (or PyLate) files declare, whatever config.json's class
    name says: all-mpnet-base-v2 is saved as MPNetForMaskedLM, Qwen3-Embedding as
    Qwen3ForCausalLM, and both are embedding models."""
    modules = layout.module_types
    st_type = str(layout.st_config.get("model_type", "")).lower()
    if "SpladePooling" in modules or st_type == "sparseencoder":
        return "sparse"
    if (
        layout.architecture == "HF_ColBERT"
        or layout.colbert_metadata
        or st_type == "colbert"
        or (layout.dense and "Pooling" not in modules)
    ):
        # Stanford ColBERT (HF_ColBERT with a `linear` head), or PyLate: a projection applied to
        # every token and no pooling module.
        return "late_interaction"
    if "Pooling" in modules:
        return "embedding"
    config = layout.hf_config
    if (
        st_type == "crossencoder"
        or isinstance(config.get("sentence_transformers"), dict)
        or "sbert_ce_default_activation_function" in config
    ):
        return "cross_encoder" if layout.num_labels == 1 else "classifier"
    return None


def detect_kind(layout: ModelLayout, task: str | None = None) -> Kind:
    """The kind of model in `layout`, or the one `task` forces. sentence-transformers' files
    decide first, then the transformers class name; a class that could be several kinds
    (a masked LM, a causal LM) is refused with the `--task` that serves it. A static model
    (a table of token vectors) is an embedding model and nothing else."""
    if layout.static is not None:
        if task not in (None, "auto") and TASK_OVERRIDES.get(task) != "embedding":
            raise SettingError(
                f"{layout.directory} is a static embedding model ({layout.architecture}): it "
                f"serves as an embedding model only; leave --task out"
            )
        return "embedding"
    if task is not None and task != "auto":
        if task not in TASK_OVERRIDES:
            raise ModelLoadError(
                f"unknown task {task!r}: use auto or one of {', '.join(KINDS)} (or vLLM's "
                f"{', '.join(VLLM_TASK_NAMES)})"
            )
        return TASK_OVERRIDES[task]
    declared = _sentence_transformers_kind(layout)
    if declared is not None:
        return declared
    architecture = layout.architecture
    if architecture.endswith("ForSequenceClassification"):
        return "cross_encoder" if layout.num_labels == 1 else "classifier"
    if architecture.endswith("ForTokenClassification"):
        return "token_classifier"
    if architecture.endswith("ForMaskedLM"):
        raise SettingError(
            f"{layout.directory} is a masked language model ({architecture}) with no "
            "sentence-transformers modules saying how to pool it: pass --task sparse to serve "
            "it as SPLADE, or --task embedding for mean-pooled vectors"
        )
    if layout.is_causal_lm:
        raise SettingError(
            f"{layout.directory} is a causal language model ({architecture}) with no "
            "sentence-transformers Pooling module: pass --task cross_encoder to serve it as an "
            "LLM reranker scored by its yes/no logits (Qwen3-Reranker, bge-reranker-v2-gemma), "
            "or --task embedding for its last token's hidden state"
        )
    return "embedding"
