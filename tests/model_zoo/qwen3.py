"""Qwen3: Qwen3-Embedding-0.6B, Qwen3-Reranker-0.6B (a causal LM scored by its card's formula)
and tomaarsen/Qwen3-Reranker-0.6B-seq-cls (the same converted to sequence classification)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from tests.model_zoo.constants import (
    CHATML_TEMPLATE,
    HIDDEN,
    INTERMEDIATE,
    LAYERS,
    QWEN3_EMBEDDING_PROMPTS,
)
from tests.model_zoo.st_files import st_versions, write_pooling, write_st
from tests.model_zoo.tokenizer_files import write_qwen_tokenizer
from tests.model_zoo.training import qwen_bpe
from tests.model_zoo.weights import save_model, seed_torch
from tests.tiny_models import INITIALIZER_RANGE, _read_json, _write_json


def _qwen3_config(ids: Mapping[str, int], **extra: Any) -> Any:
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=ids["size"],
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,  # as in Qwen3-0.6B, num_heads * head_dim (64) is not hidden_size (32)
        max_position_embeddings=32768,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        use_sliding_window=False,
        sliding_window=None,
        max_window_layers=28,
        attention_bias=False,
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|endoftext|>"],
        initializer_range=INITIALIZER_RANGE,
        **extra,
    )


def make_qwen3_embedding_0_6b(directory: Path) -> Path:
    """Qwen/Qwen3-Embedding-0.6B: architectures ["Qwen3ForCausalLM"], model_type qwen3,
    max_position_embeddings 32768, tie_word_embeddings true, bfloat16 weights of a
    Qwen3ForCausalLM (under "model."; the tied lm_head is not stored), GQA (4 heads, 2 KV heads)
    with head_dim 16 != hidden/heads. Qwen's byte-level BPE whose tokenizer.json appends
    <|endoftext|> (TemplateProcessing, the June 2025 fix), padding_side "left", eos_token
    <|im_end|>. Transformer + Pooling(lasttoken, include_prompt true) + Normalize,
    max_seq_length 32768, prompts query (the web-search instruction) and document ("").
    tokenizer_config.json carries a chat template, as the repository's does (there Qwen3's own,
    with tools and thinking; here the ChatML markup it writes for plain messages)."""
    from transformers import Qwen3ForCausalLM

    ids = write_qwen_tokenizer(directory, append_endoftext=True, padding_side="left")
    config_path = directory / "tokenizer_config.json"
    _write_json(config_path, {**_read_json(config_path), "chat_template": CHATML_TEMPLATE})
    seed_torch(8)
    save_model(
        Qwen3ForCausalLM(_qwen3_config(ids)),
        directory,
        dtype=torch.bfloat16,
        transformers_version="4.51.3",
        drop=("layer_types",),
    )
    write_st(
        directory,
        [("", "Transformer"), ("1_Pooling", "Pooling"), ("2_Normalize", "Normalize")],
        max_seq_length=32768,
        st_config={
            **st_versions("3.4.1", "4.51.3", "2.6.0+cu124"),
            "prompts": QWEN3_EMBEDDING_PROMPTS,
            "default_prompt_name": None,
            "similarity_fn_name": "cosine",
        },
    )
    write_pooling(directory, HIDDEN, "lasttoken")
    return directory


def _qwen3_reranker(directory: Path, *, padding_side: str | None) -> tuple[Any, dict[str, int]]:
    """The Qwen3-Reranker tokenizer in `directory` (nothing appended) and the seeded
    Qwen3ForCausalLM both Qwen3-Reranker generators start from, rounded to bfloat16."""
    from transformers import Qwen3ForCausalLM

    ids = write_qwen_tokenizer(directory, append_endoftext=False, padding_side=padding_side)
    seed_torch(24)
    return Qwen3ForCausalLM(_qwen3_config(ids)).to(torch.bfloat16), ids


def make_qwen3_reranker_0_6b(directory: Path) -> Path:
    """Qwen/Qwen3-Reranker-0.6B: Qwen3ForCausalLM (tied embeddings, bfloat16), Qwen's BPE whose
    tokenizer appends nothing, no sentence-transformers files: scored by the model card's formula
    (`qwen3_reranker_reference_scores`), softmax over the last position's "no" / "yes" logits.
    Serve with task cross_encoder."""
    model, _ = _qwen3_reranker(directory, padding_side=None)
    save_model(
        model,
        directory,
        dtype=torch.bfloat16,
        transformers_version="4.51.0",
        drop=("layer_types",),
    )
    return directory


def make_qwen3_reranker_0_6b_seq_cls(directory: Path) -> Path:
    """tomaarsen/Qwen3-Reranker-0.6B-seq-cls: `make_qwen3_reranker_0_6b`'s model converted to
    Qwen3ForSequenceClassification with one label, score.weight = lm_head["yes"] -
    lm_head["no"] (so sigmoid(score) is the causal model's softmax over no/yes), pad_token_id
    <|endoftext|>, bfloat16, tokenizer padding_side "left", in the layout sentence-transformers
    4.x's CrossEncoder saved (config.json's "sentence_transformers" with the Sigmoid activation;
    no modules.json). The card formats each pair itself: (prefix + "<Instruct>: ...\\n<Query>:
    ...\\n", "<Document>: ..." + suffix), see `qwen3_reranker_seq_cls_pairs`."""
    from transformers import Qwen3ForSequenceClassification

    causal, ids = _qwen3_reranker(directory, padding_side="left")
    vocab = qwen_bpe()[0]
    config = _qwen3_config(
        ids,
        num_labels=1,
        pad_token_id=ids["<|endoftext|>"],
    )
    model = Qwen3ForSequenceClassification(config)
    model.model.load_state_dict(causal.model.state_dict())
    head = causal.lm_head.weight.detach().float()
    with torch.no_grad():
        model.score.weight.copy_((head[vocab["yes"]] - head[vocab["no"]])[None, :])
    save_model(
        model,
        directory,
        dtype=torch.bfloat16,
        transformers_version="4.51.3",
        drop=("layer_types",),
        sentence_transformers={
            "activation_fn": "torch.nn.modules.activation.Sigmoid",
            "version": "4.1.0",
        },
    )
    return directory
