"""Qwen2 backbones: gte-Qwen2-1.5B-instruct (bidirectional, `is_causal` false) and
stella_en_1.5B_v5 (mean pooling and a Dense folder saved as pytorch_model.bin)."""

from __future__ import annotations

from pathlib import Path

import torch

from tests.model_zoo.constants import (
    GTE_QWEN2_PROMPTS,
    HIDDEN,
    INTERMEDIATE,
    LAYERS,
    STELLA_PROMPTS,
)
from tests.model_zoo.st_files import st_versions, write_dense, write_pooling, write_st
from tests.model_zoo.tokenizer_files import write_qwen_tokenizer
from tests.model_zoo.weights import save_model, seed_torch
from tests.tiny_models import INITIALIZER_RANGE


def make_gte_qwen2_1_5b_instruct(directory: Path) -> Path:
    """Alibaba-NLP/gte-Qwen2-1.5B-instruct-style: architectures ["Qwen2ForCausalLM"], float32
    weights of a Qwen2ForCausalLM with its own (untied) lm_head, and bidirectional attention said
    the way transformers >= 5.2 honours natively, `"is_causal": false` in config.json. The real
    repository reaches bidirectional attention through its modeling_qwen.py (trust_remote_code)
    and appends <|endoftext|> through its tokenization_qwen.py; this one is native: the
    <|endoftext|> comes from tokenizer.json's post-processor. The checkpoint keeps its lm_head
    (gte-Qwen2-1.5B-instruct counts 1.78B parameters: Qwen2-1.5B plus an untied head), so
    `AutoModel` (Qwen2Model) reports lm_head.weight as UNEXPECTED on every load, as with the real
    one; nothing is missing. Transformer + Pooling(lasttoken) + Normalize, max_seq_length 32768,
    prompt query (the web-search instruction)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    ids = write_qwen_tokenizer(
        directory, append_endoftext=True, eos_token="<|endoftext|>", model_max_length=32768
    )
    seed_torch(10)
    config = Qwen2Config(
        vocab_size=ids["size"],
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=131072,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        use_sliding_window=False,
        max_window_layers=28,
        tie_word_embeddings=False,
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|endoftext|>"],
        is_causal=False,
        initializer_range=INITIALIZER_RANGE,
    )
    save_model(
        Qwen2ForCausalLM(config),
        directory,
        dtype=torch.float32,
        transformers_version="4.41.2",
        drop=("layer_types",),
    )
    write_st(
        directory,
        [("", "Transformer"), ("1_Pooling", "Pooling"), ("2_Normalize", "Normalize")],
        max_seq_length=32768,
        st_config={
            **st_versions("2.7.0", "4.41.2", "2.3.0+cu121"),
            "prompts": GTE_QWEN2_PROMPTS,
            "default_prompt_name": None,
        },
    )
    write_pooling(directory, HIDDEN, "lasttoken")
    return directory


STELLA_DENSE_DIM = 16  # the dimension of the Dense folder modules.json names (real: 1024)


def make_stella_en_1_5b_v5(directory: Path) -> Path:
    """dunzhang/stella_en_1.5B_v5-style: a Qwen2 backbone (a Qwen2Model checkpoint, keys without
    prefix, architectures ["Qwen2Model"]) with Qwen's BPE (nothing appended), Transformer +
    Pooling(mean) + Dense at "2_Dense_16" (hidden -> 16 with bias, Identity, in a torch.save'd
    pytorch_model.bin as sentence-transformers 2.x/3.0 saved Dense weights), no Normalize
    module; like the real 2_Dense_{256..8192} folders, a second Dense folder "2_Dense_8" is there
    that modules.json does not name. Prompts s2p_query / s2s_query, max_seq_length 512."""
    from transformers import Qwen2Config, Qwen2Model

    ids = write_qwen_tokenizer(
        directory, append_endoftext=False, eos_token="<|endoftext|>", model_max_length=32768
    )
    seed_torch(17)
    config = Qwen2Config(
        vocab_size=ids["size"],
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=131072,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        use_sliding_window=False,
        max_window_layers=21,
        tie_word_embeddings=False,
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|endoftext|>"],
        initializer_range=INITIALIZER_RANGE,
    )
    save_model(
        Qwen2Model(config),
        directory,
        dtype=torch.float32,
        transformers_version="4.42.3",
        drop=("layer_types",),
    )
    dense = f"2_Dense_{STELLA_DENSE_DIM}"
    write_st(
        directory,
        [("", "Transformer"), ("1_Pooling", "Pooling"), (dense, "Dense")],
        max_seq_length=512,
        st_config={
            **st_versions("3.0.1", "4.42.3", "2.3.1+cu121"),
            "prompts": STELLA_PROMPTS,
            "default_prompt_name": None,
            "similarity_fn_name": "cosine",
        },
    )
    write_pooling(directory, HIDDEN, "mean")
    write_dense(
        directory, dense, HIDDEN, STELLA_DENSE_DIM, bias=True, file_name="pytorch_model.bin"
    )
    write_dense(directory, "2_Dense_8", HIDDEN, 8, bias=True, file_name="pytorch_model.bin")
    return directory
