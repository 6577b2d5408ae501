"""Nomic: nomic-embed-text-v1.5, a trust_remote_code NomicBertModel (code in
remote_code/nomic.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from tests.model_zoo.constants import (
    BERT_VOCAB,
    HIDDEN,
    INTERMEDIATE,
    LAYERS,
    NOMIC_PROMPTS,
)
from tests.model_zoo.remote_code.nomic import NOMIC_CONFIGURATION, NOMIC_MODELING
from tests.model_zoo.st_files import st_versions, write_pooling, write_st
from tests.model_zoo.tokenizer_files import write_bert_tokenizer
from tests.model_zoo.weights import rounded, save_custom
from tests.tiny_models import INITIALIZER_RANGE


def _config() -> dict[str, Any]:
    """nomic-embed-text-v1.5's config.json (GPT-2 style size keys, auto_map to the local files)."""
    return {
        "_name_or_path": "nomic-ai/nomic-embed-text-v1.5",
        "activation_function": "swiglu",
        "architectures": ["NomicBertModel"],
        "attn_pdrop": 0.0,
        "auto_map": {
            "AutoConfig": "configuration_hf_nomic_bert.NomicBertConfig",
            "AutoModel": "modeling_hf_nomic_bert.NomicBertModel",
        },
        "bos_token_id": None,
        "causal": False,
        "dense_seq_output": True,
        "embd_pdrop": 0.0,
        "eos_token_id": None,
        "fused_bias_fc": True,
        "fused_dropout_add_ln": True,
        "initializer_range": INITIALIZER_RANGE,
        "layer_norm_epsilon": 1e-12,
        "max_trained_positions": 2048,
        "mlp_fc1_bias": False,
        "mlp_fc2_bias": False,
        "model_type": "nomic_bert",
        "n_embd": HIDDEN,
        "n_head": 2,
        "n_inner": INTERMEDIATE,
        "n_layer": LAYERS,
        "n_positions": 8192,
        "pad_vocab_size_multiple": 64,
        "parallel_block": False,
        "parallel_block_tied_norm": False,
        "prenorm": False,
        "qkv_proj_bias": False,
        "reorder_and_upcast_attn": False,
        "resid_pdrop": 0.0,
        "rotary_emb_base": 1000,
        "rotary_emb_fraction": 1.0,
        "rotary_emb_interleaved": False,
        "rotary_emb_scale_base": None,
        "rotary_scaling_factor": None,
        "scale_attn_by_inverse_layer_idx": False,
        "scale_attn_weights": True,
        "summary_activation": None,
        "summary_first_dropout": 0.0,
        "summary_proj_to_labels": True,
        "summary_type": "cls_index",
        "summary_use_proj": True,
        "torch_dtype": "float32",
        "transformers_version": "4.37.2",
        "type_vocab_size": 2,
        "use_cache": True,
        "use_flash_attn": True,
        "use_rms_norm": False,
        "use_xentropy": True,
        "vocab_size": rounded(BERT_VOCAB, 64),
    }


def make_nomic_embed_text_v1_5(directory: Path) -> Path:
    """nomic-ai/nomic-embed-text-v1.5: code shipped with the model (trust_remote_code).
    configuration_hf_nomic_bert.py (NomicBertConfig, a GPT2Config subclass: config.json has
    n_embd / n_layer / n_head / n_inner / n_positions, no hidden_size key; `config.hidden_size`
    works only through GPT2Config's attribute_map) and modeling_hf_nomic_bert.py (NomicBertModel:
    rotary, SwiGLU, fused Wqkv, weights embeddings.*, emb_ln.*, encoder.layers.N.{attn.Wqkv,
    attn.out_proj, mlp.fc11, mlp.fc12, mlp.fc2, norm1, norm2}); architectures ["NomicBertModel"],
    vocab_size 30528 (the 30522-token tokenizer padded to a multiple of 64). The real auto_map
    points into another repository (nomic-ai/nomic-bert-2048--...), which needs the hub; here it
    names the local files. BERT tokenizer, Transformer + Pooling(mean) + Normalize, max_seq_length
    8192, prompts search_query / search_document / classification / clustering."""
    write_bert_tokenizer(directory, model_max_length=8192)
    save_custom(
        directory,
        code={
            "configuration_hf_nomic_bert.py": NOMIC_CONFIGURATION,
            "modeling_hf_nomic_bert.py": NOMIC_MODELING,
        },
        config=_config(),
        auto_class="AutoModel",
        seed=5,
        dtype=torch.float32,
    )
    write_st(
        directory,
        [("", "Transformer"), ("1_Pooling", "Pooling"), ("2_Normalize", "Normalize")],
        max_seq_length=8192,
        st_config={
            **st_versions("2.4.0.dev0", "4.37.2", "2.1.0+cu121"),
            "prompts": NOMIC_PROMPTS,
            "default_prompt_name": None,
        },
    )
    write_pooling(directory, HIDDEN, "mean")
    return directory
