"""XLM-RoBERTa: multilingual-e5-base, multilingual-e5-large-instruct and bge-reranker-v2-m3,
and the XLMRobertaConfig they (and BGE-M3) share."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from tests.model_zoo.constants import (
    E5_MISTRAL_PROMPTS,
    E5_PROMPTS,
    HIDDEN,
    INTERMEDIATE,
    LAYERS,
)
from tests.model_zoo.st_files import st_versions, write_pooling, write_st
from tests.model_zoo.tokenizer_files import write_xlmr_tokenizer
from tests.model_zoo.weights import save_model, seed_torch
from tests.tiny_models import INITIALIZER_RANGE


def xlmr_config(vocab_size: int, max_position_embeddings: int = 514, **extra: Any) -> Any:
    """The zoo's XLMRobertaConfig (2 layers, 32 wide, pad 1, bos 0, eos 2, one token type)."""
    from transformers import XLMRobertaConfig

    return XLMRobertaConfig(
        vocab_size=vocab_size,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=2,
        intermediate_size=INTERMEDIATE,
        max_position_embeddings=max_position_embeddings,
        type_vocab_size=1,
        layer_norm_eps=1e-5,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        initializer_range=INITIALIZER_RANGE,
        **extra,
    )


def _make_xlmr_embedding(
    directory: Path, *, seed: int, prompts: Mapping[str, str], version: str
) -> Path:
    from transformers import XLMRobertaModel

    size = write_xlmr_tokenizer(directory)
    seed_torch(seed)
    save_model(
        XLMRobertaModel(xlmr_config(size)),
        directory,
        dtype=torch.float32,
        transformers_version=version,
    )
    write_st(
        directory,
        [("", "Transformer"), ("1_Pooling", "Pooling"), ("2_Normalize", "Normalize")],
        max_seq_length=512,
        st_config={
            **st_versions("2.2.2", version, "1.13.1+cu117"),
            "prompts": dict(prompts),
            "default_prompt_name": None,
        },
    )
    write_pooling(directory, HIDDEN, "mean", legacy=True)
    return directory


def make_multilingual_e5_base(directory: Path) -> Path:
    """intfloat/multilingual-e5-base: XLMRobertaModel (positions counted from padding_idx + 1,
    max_position_embeddings 514, type_vocab_size 1), XLM-RoBERTa Unigram tokenizer,
    Transformer + Pooling(mean) + Normalize, prompts query / passage, max_seq_length 512."""
    return _make_xlmr_embedding(directory, seed=14, prompts=E5_PROMPTS, version="4.29.0.dev0")


def make_multilingual_e5_large_instruct(directory: Path) -> Path:
    """intfloat/multilingual-e5-large-instruct: XLMRobertaModel, Transformer + Pooling(mean) +
    Normalize, the instruct-style query prompt "Instruct: {task}\\nQuery: " of its model card as
    prompt web_search_query (documents take none), max_seq_length 512."""
    return _make_xlmr_embedding(
        directory,
        seed=15,
        prompts={"web_search_query": E5_MISTRAL_PROMPTS["web_search_query"]},
        version="4.38.1",
    )


def make_bge_reranker_v2_m3(directory: Path) -> Path:
    """BAAI/bge-reranker-v2-m3: XLMRobertaForSequenceClassification with one label (LABEL_0),
    max_position_embeddings 8194, in the plain transformers layout (config.json,
    model.safetensors, tokenizer; no sentence-transformers files), float32."""
    from transformers import XLMRobertaForSequenceClassification

    size = write_xlmr_tokenizer(directory, model_max_length=8192)
    seed_torch(22)
    config = xlmr_config(size, max_position_embeddings=8194, num_labels=1)
    save_model(
        XLMRobertaForSequenceClassification(config),
        directory,
        dtype=torch.float32,
        transformers_version="4.38.1",
    )
    return directory
