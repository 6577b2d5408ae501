"""Which task processors a loaded model supports, built once from its kind and configuration."""

from __future__ import annotations

import string
from dataclasses import dataclass, field
from typing import Any, TypeVar

from poolserve.inputs.tokenizer import TextTokenizer
from poolserve.models.kinds import Head
from poolserve.models.spec import ModelSpec
from poolserve.tasks.chat import ChatTemplate
from poolserve.tasks.classify import Activation, ClassifierHead, ClassifyTask
from poolserve.tasks.cross_encoder_score import CrossEncoderScorer
from poolserve.tasks.embed import ChunkedEmbedTask, EmbedTask
from poolserve.tasks.m3_score import M3Scorer
from poolserve.tasks.pooling import PoolingTask
from poolserve.tasks.prompts import Prompts, read_prompts
from poolserve.tasks.score import (
    BiEncoderScorer,
    LateInteractionConfig,
    LateInteractionScorer,
    Scorer,
    ScoreTask,
)
from poolserve.tasks.template_score import TemplateScorer

T = TypeVar("T", bound=EmbedTask)


@dataclass(frozen=True)
class TaskSet:
    heads: tuple[Head, ...]
    pooling: PoolingTask
    embed: EmbedTask | None = None
    # The same embedding task, answering with each input's chunks too.
    embed_chunks: ChunkedEmbedTask | None = None
    classify: ClassifyTask | None = None
    score: ScoreTask | None = None
    sparse: bool = False
    prompts: Prompts = field(default_factory=Prompts)
    # An embedding model's chat template, where its checkpoint has one (chat-style inputs).
    chat_template: ChatTemplate | None = None
    # Whether it embeds images beside texts (an image-text model: CLIP, SigLIP).
    images: bool = False


def classifier_head(spec: ModelSpec) -> ClassifierHead:
    config = spec.layout.hf_config
    id2label = config.get("id2label") or {}
    labels = tuple(str(id2label[key]) for key in sorted(id2label, key=int))
    if not labels:
        labels = tuple(f"LABEL_{index}" for index in range(spec.layout.num_labels))
    if spec.kind == "cross_encoder":
        return ClassifierHead(labels=labels, activation=cross_encoder_activation(spec))
    multi_label = config.get("problem_type") == "multi_label_classification"
    one_label = spec.layout.num_labels == 1
    return ClassifierHead(
        labels=labels, activation="sigmoid" if multi_label or one_label else "softmax"
    )


def cross_encoder_activation(spec: ModelSpec) -> Activation:
    """The CrossEncoder's activation, wherever sentence-transformers stored it: 6.x in
    config_sentence_transformers.json, 4.x in config.json's "sentence_transformers" section,
    older versions as "sbert_ce_default_activation_function". Unset: sigmoid for one label,
    the logits otherwise (as sentence-transformers does)."""
    config = spec.layout.hf_config
    configured = str(
        spec.layout.st_config.get("activation_fn")
        or (config.get("sentence_transformers") or {}).get("activation_fn")
        or config.get("sbert_ce_default_activation_function")
        or ""
    )
    if configured:
        if configured.endswith("Sigmoid"):
            return "sigmoid"
        return "softmax" if configured.endswith("Softmax") else "identity"
    return "sigmoid" if spec.layout.num_labels == 1 else "identity"


def late_interaction_config(spec: ModelSpec, tokenizer: TextTokenizer) -> LateInteractionConfig:
    """PyLate's settings from config_sentence_transformers.json (absent keys: no effect), or
    Stanford ColBERT's from artifact.metadata."""
    metadata = spec.layout.colbert_metadata
    if metadata:
        return _stanford_colbert_config(metadata, tokenizer)
    st_config = spec.layout.st_config

    def marker(key: str) -> int | None:
        prefix = str(st_config.get(key) or "").strip()
        return tokenizer.token_id(prefix) if prefix else None

    query_length = st_config.get("query_length")
    expand = bool(st_config.get("do_query_expansion")) and bool(query_length)
    skiplist = {
        token
        for word in st_config.get("skiplist_words") or ()
        if (token := tokenizer.token_id(str(word))) is not None
    }
    return LateInteractionConfig(
        query_marker=marker("query_prefix"),
        document_marker=marker("document_prefix"),
        query_length=int(query_length) if query_length else None,
        mask_token=_mask_token(tokenizer) if expand else None,
        attend_to_expansion=bool(st_config.get("attend_to_expansion_tokens")),
        skiplist=frozenset(skiplist),
    )


def _stanford_colbert_config(
    metadata: dict[str, Any], tokenizer: TextTokenizer
) -> LateInteractionConfig:
    """Stanford ColBERT always expands queries to query_maxlen with [MASK]; with
    mask_punctuation, punctuation tokens of documents are not scored."""
    query_length = metadata.get("query_maxlen")
    skiplist = (
        {t for char in string.punctuation if (t := tokenizer.token_id(char)) is not None}
        if metadata.get("mask_punctuation")
        else set()
    )
    return LateInteractionConfig(
        query_marker=tokenizer.token_id(str(metadata.get("query_token_id", "[unused0]"))),
        document_marker=tokenizer.token_id(str(metadata.get("doc_token_id", "[unused1]"))),
        query_length=int(query_length) if query_length else None,
        mask_token=_mask_token(tokenizer) if query_length else None,
        attend_to_expansion=bool(metadata.get("attend_to_mask_tokens")),
        skiplist=frozenset(skiplist),
    )


def _mask_token(tokenizer: TextTokenizer) -> int | None:
    return tokenizer.token_id("[MASK]") or tokenizer.token_id("<mask>")


def build_tasks(spec: ModelSpec, *, max_input_tokens: int = 32768) -> TaskSet:
    tokenizer = TextTokenizer(spec.tokenizer)
    limit = spec.max_model_len
    kind = spec.kind
    classifier = (
        classifier_head(spec)
        if kind in ("classifier", "cross_encoder", "token_classifier")
        else None
    )
    scorer: Scorer | None = None
    m3 = kind == "embedding" and spec.layout.m3_heads
    if kind == "cross_encoder" and spec.score_template is not None:
        classifier = ClassifierHead(labels=("score",), activation="sigmoid")
        scorer = TemplateScorer(
            max_model_len=limit, template=spec.score_template, classifier=classifier
        )
        scorer.check_room(tokenizer)
    elif kind == "cross_encoder":
        assert classifier is not None
        scorer = CrossEncoderScorer(max_model_len=limit, classifier=classifier)
    elif m3:
        scorer = M3Scorer(max_model_len=limit, special_ids=frozenset(spec.special_token_ids))
    elif kind == "embedding":
        scorer = BiEncoderScorer(
            max_model_len=limit, cuts_texts=spec.default_long_input == "truncate"
        )
    elif kind == "late_interaction":
        config = late_interaction_config(spec, tokenizer)
        scorer = LateInteractionScorer(max_model_len=limit, config=config)

    def embed_task(task: type[T]) -> T | None:
        if kind != "embedding":
            return None
        return task(
            max_model_len=limit,
            include_prompt=spec.layout.include_prompt,
            max_input_tokens=max_input_tokens,
        )

    return TaskSet(
        # The heads a request may name (`/pooling`); "m3" is BGE-M3's scorers' own, and
        # "image_embed" runs images only.
        heads=tuple(head for head in spec.heads if head not in ("m3", "image_embed")),
        # BGE-M3's token vectors are those of every token after [CLS] (FlagEmbedding's).
        pooling=PoolingTask(max_model_len=limit, classifier=classifier, first_token_row=int(m3)),
        embed=embed_task(EmbedTask),
        embed_chunks=embed_task(ChunkedEmbedTask),
        # An LLM reranker reads pairs through its template: a lone text has no score.
        classify=(
            ClassifyTask(max_model_len=limit, classifier=classifier)
            if classifier is not None and kind != "token_classifier" and spec.score_template is None
            else None
        ),
        score=ScoreTask(scorer) if scorer is not None else None,
        sparse=kind == "sparse" or m3,
        prompts=read_prompts(spec.layout.st_config, spec.prompts),
        chat_template=ChatTemplate.of(spec.layout.directory) if kind == "embedding" else None,
        images=spec.layout.vision is not None,
    )
