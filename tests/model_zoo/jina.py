"""Jina: jina-embeddings-v2-base-en (JinaBertModel) and jina-reranker-v2-base-multilingual
(XLM-RoBERTa flash implementation), both trust_remote_code (code in remote_code/jina_bert.py and
remote_code/jina_xlm_roberta.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from tests.model_zoo.constants import BERT_VOCAB, HIDDEN, INTERMEDIATE, LAYERS
from tests.model_zoo.remote_code.jina_bert import JINA_BERT_CONFIGURATION, JINA_BERT_MODELING
from tests.model_zoo.remote_code.jina_xlm_roberta import (
    JINA_XLM_ROBERTA_CONFIGURATION,
    JINA_XLM_ROBERTA_MODELING,
)
from tests.model_zoo.st_files import st_versions, write_pooling, write_st
from tests.model_zoo.tokenizer_files import write_bert_tokenizer, write_xlmr_tokenizer
from tests.model_zoo.weights import rounded, save_custom
from tests.tiny_models import INITIALIZER_RANGE


def _embeddings_config() -> dict[str, Any]:
    """jina-embeddings-v2-base-en's config.json (model_type "bert", ALiBi, GEGLU, auto_map to
    the local files)."""
    return {
        "_name_or_path": "jinaai/jina-bert-implementation",
        "architectures": ["JinaBertForMaskedLM"],
        "attention_probs_dropout_prob": 0.0,
        "auto_map": {
            "AutoConfig": "configuration_bert.JinaBertConfig",
            "AutoModel": "modeling_bert.JinaBertModel",
        },
        "classifier_dropout": None,
        "emb_pooler": "mean",
        "feed_forward_type": "geglu",
        "gradient_checkpointing": False,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "hidden_size": HIDDEN,
        "initializer_range": INITIALIZER_RANGE,
        "intermediate_size": INTERMEDIATE,
        "layer_norm_eps": 1e-12,
        "max_position_embeddings": 8192,
        "model_max_length": 8192,
        "model_type": "bert",
        "num_attention_heads": 2,
        "num_hidden_layers": LAYERS,
        "pad_token_id": 0,
        "position_embedding_type": "alibi",
        "torch_dtype": "float32",
        "transformers_version": "4.26.0",
        "type_vocab_size": 2,
        "use_cache": True,
        "vocab_size": rounded(BERT_VOCAB, 64),
    }


def make_jina_embeddings_v2_base_en(directory: Path) -> Path:
    """jinaai/jina-embeddings-v2-base-en: config.json says model_type "bert" but architectures
    ["JinaBertForMaskedLM"] and an auto_map to configuration_bert.JinaBertConfig /
    modeling_bert.JinaBertModel (shipped here; the real one points at jinaai/jina-bert-
    implementation): BERT blocks with ALiBi (no position embeddings) and a GEGLU MLP
    (mlp.gated_layers, mlp.wo, mlp.layernorm). The weights are the encoder of a
    JinaBertForMaskedLM, under "bert."; with trust_remote_code JinaBertModel loads them (the
    prefix is its base_model_prefix); natively transformers builds a BertModel from the same
    config.json, which finds the embeddings and attention weights but reports its position
    embeddings and feed-forward layers MISSING (newly initialised) and the GEGLU weights
    UNEXPECTED. BERT tokenizer, Transformer + Pooling(mean), no Normalize, max_seq_length 8192."""
    write_bert_tokenizer(directory, model_max_length=8192)
    save_custom(
        directory,
        code={
            "configuration_bert.py": JINA_BERT_CONFIGURATION,
            "modeling_bert.py": JINA_BERT_MODELING,
        },
        config=_embeddings_config(),
        auto_class="AutoModel",
        seed=7,
        dtype=torch.float32,
        prefix="bert.",
    )
    write_st(
        directory,
        [("", "Transformer"), ("1_Pooling", "Pooling")],
        max_seq_length=8192,
        st_config=st_versions("2.2.2", "4.26.0", "1.13.1+cu117"),
    )
    write_pooling(directory, HIDDEN, "mean", legacy=True)
    return directory


def _reranker_config(size: int) -> dict[str, Any]:
    """jina-reranker-v2-base-multilingual's config.json for a vocabulary of `size` tokens."""
    return {
        "_name_or_path": "jinaai/jina-reranker-v2-base-multilingual",
        "architectures": ["XLMRobertaForSequenceClassification"],
        "attention_probs_dropout_prob": 0.1,
        "auto_map": {
            "AutoConfig": "configuration_xlm_roberta.XLMRobertaFlashConfig",
            "AutoModel": "modeling_xlm_roberta.XLMRobertaModel",
            "AutoModelForSequenceClassification": (
                "modeling_xlm_roberta.XLMRobertaForSequenceClassification"
            ),
        },
        "bos_token_id": 0,
        "classifier_dropout": None,
        "emb_pooler": None,
        "eos_token_id": 2,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "hidden_size": HIDDEN,
        "id2label": {"0": "LABEL_0"},
        "initializer_range": INITIALIZER_RANGE,
        "intermediate_size": INTERMEDIATE,
        "label2id": {"LABEL_0": 0},
        "layer_norm_eps": 1e-05,
        "max_position_embeddings": 1026,
        "model_type": "xlm-roberta",
        "num_attention_heads": 2,
        "num_hidden_layers": LAYERS,
        "output_past": True,
        "pad_token_id": 1,
        "position_embedding_type": "absolute",
        "torch_dtype": "bfloat16",
        "transformers_version": "4.40.2",
        "type_vocab_size": 1,
        "use_cache": False,
        "use_flash_attn": True,
        "vocab_size": size,
    }


def make_jina_reranker_v2_base_multilingual(directory: Path) -> Path:
    """jinaai/jina-reranker-v2-base-multilingual-style: code shipped with the model
    (configuration_xlm_roberta.py with XLMRobertaFlashConfig, model_type "xlm-roberta";
    modeling_xlm_roberta.py with XLMRobertaModel and XLMRobertaForSequenceClassification whose
    forward returns `logits`; auto_map for AutoConfig, AutoModel and
    AutoModelForSequenceClassification; the real one points at
    jinaai/xlm-roberta-flash-implementation), architectures
    ["XLMRobertaForSequenceClassification"], one label, bfloat16 weights under roberta.* and
    classifier.*, XLM-RoBERTa tokenizer (model_max_length 1024), no sentence-transformers files."""
    size = write_xlmr_tokenizer(directory, model_max_length=1024)
    save_custom(
        directory,
        code={
            "configuration_xlm_roberta.py": JINA_XLM_ROBERTA_CONFIGURATION,
            "modeling_xlm_roberta.py": JINA_XLM_ROBERTA_MODELING,
        },
        config=_reranker_config(size),
        auto_class="AutoModelForSequenceClassification",
        seed=26,
        dtype=torch.bfloat16,
    )
    return directory
