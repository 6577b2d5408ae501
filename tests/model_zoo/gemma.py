"""Gemma: embeddinggemma-300m (bidirectional Gemma3TextModel + Dense + Dense + Normalize) and
bge-reranker-v2-gemma (a GemmaForCausalLM scored by FlagLLMReranker's formula)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from tests.model_zoo.constants import EMBEDDINGGEMMA_PROMPTS, HIDDEN, INTERMEDIATE, LAYERS
from tests.model_zoo.st_files import st_versions, write_dense, write_pooling, write_st
from tests.model_zoo.tokenizer_files import write_gemma_tokenizer
from tests.model_zoo.weights import save_model, seed_torch
from tests.tiny_models import INITIALIZER_RANGE

EMBEDDINGGEMMA_DENSE_DIM = 4 * HIDDEN


def _embeddinggemma_config(size: int) -> Any:
    """The Gemma3TextConfig of embeddinggemma-300m's copy for a vocabulary of `size` tokens:
    bidirectional, one sliding (window 16) and one full layer, MQA with head_dim 16."""
    from transformers import Gemma3TextConfig

    return Gemma3TextConfig(
        vocab_size=size,
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        query_pre_attn_scalar=16,
        max_position_embeddings=2048,
        sliding_window=16,
        layer_types=["sliding_attention", "full_attention"],
        use_bidirectional_attention=True,
        rope_theta=1000000.0,
        rope_local_base_freq=10000.0,
        rms_norm_eps=1e-6,
        hidden_activation="gelu_pytorch_tanh",
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
        initializer_range=INITIALIZER_RANGE,
    )


def make_embeddinggemma_300m(directory: Path) -> Path:
    """google/embeddinggemma-300m: Gemma3TextModel (model_type gemma3_text), bidirectional
    attention (`use_bidirectional_attention` true, which transformers 5.24's Gemma3TextConfig
    honours and for which it halves sliding_window into a symmetric window), one sliding and one
    full layer (sliding_window 16 here, 512 in the real one), Gemma's SentencePiece BPE with
    <bos> prepended and <eos> appended. Transformer + Pooling(mean) + Dense hidden -> 4 x hidden
    (2_Dense, no bias, Identity) + Dense back (3_Dense) + 4_Normalize, max_seq_length 2048, its
    prompts (query "task: search result | query: ", document "title: none | text: ", and the
    MTEB task names)."""
    from transformers import Gemma3TextModel

    size = write_gemma_tokenizer(
        directory, add_eos_token=True, padding_side="right", model_max_length=2048
    )
    seed_torch(20)
    save_model(
        Gemma3TextModel(_embeddinggemma_config(size)),
        directory,
        dtype=torch.float32,
        transformers_version="4.57.0.dev0",
        layer_type_rope={
            "full_attention": "rope_theta",
            "sliding_attention": "rope_local_base_freq",
        },
        rope_scaling=None,
    )
    write_st(
        directory,
        [
            ("", "Transformer"),
            ("1_Pooling", "Pooling"),
            ("2_Dense", "Dense"),
            ("3_Dense", "Dense"),
            ("4_Normalize", "Normalize"),
        ],
        max_seq_length=2048,
        st_config={
            "model_type": "SentenceTransformer",
            **st_versions("5.1.0", "4.57.0.dev0", "2.8.0+cu128"),
            "prompts": EMBEDDINGGEMMA_PROMPTS,
            "default_prompt_name": None,
            "similarity_fn_name": "cosine",
        },
    )
    write_pooling(directory, HIDDEN, "mean")
    write_dense(directory, "2_Dense", HIDDEN, EMBEDDINGGEMMA_DENSE_DIM, bias=False)
    write_dense(directory, "3_Dense", EMBEDDINGGEMMA_DENSE_DIM, HIDDEN, bias=False)
    return directory


def make_bge_reranker_v2_gemma(directory: Path) -> Path:
    """BAAI/bge-reranker-v2-gemma: GemmaForCausalLM (tied embeddings, MQA with one KV head,
    head_dim 16 != hidden/heads), Gemma's SentencePiece BPE (<bos> prepended, nothing appended,
    model_max_length 1e30 as gemma-2b's), no sentence-transformers files: scored by
    FlagEmbedding's FlagLLMReranker formula (`bge_reranker_gemma_reference_scores`), the last
    position's "Yes" logit. Serve with task cross_encoder."""
    from transformers import GemmaConfig, GemmaForCausalLM

    size = write_gemma_tokenizer(directory, add_eos_token=False)
    seed_torch(25)
    config = GemmaConfig(
        vocab_size=size,
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=8192,
        rope_theta=10000.0,
        rms_norm_eps=1e-6,
        hidden_activation="gelu_pytorch_tanh",
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
        tie_word_embeddings=True,
        initializer_range=INITIALIZER_RANGE,
    )
    save_model(
        GemmaForCausalLM(config),
        directory,
        dtype=torch.float32,
        transformers_version="4.40.0",
    )
    return directory
