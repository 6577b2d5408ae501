"""GTE v1.5: gte-base-en-v1.5, a trust_remote_code NewModel (code in remote_code/gte.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from tests.model_zoo.constants import BERT_VOCAB, HIDDEN, INTERMEDIATE, LAYERS
from tests.model_zoo.remote_code.gte import GTE_CONFIGURATION, GTE_MODELING
from tests.model_zoo.st_files import st_versions, write_pooling, write_st
from tests.model_zoo.tokenizer_files import write_bert_tokenizer
from tests.model_zoo.weights import rounded, save_custom
from tests.tiny_models import INITIALIZER_RANGE


def _config() -> dict[str, Any]:
    """gte-base-en-v1.5's config.json (model_type "new", NTK rope_scaling, auto_map to the
    local files)."""
    return {
        "_name_or_path": "Alibaba-NLP/gte-base-en-v1.5",
        "architectures": ["NewModel"],
        "attention_probs_dropout_prob": 0.0,
        "auto_map": {"AutoConfig": "configuration.NewConfig", "AutoModel": "modeling.NewModel"},
        "classifier_dropout": None,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "hidden_size": HIDDEN,
        "initializer_range": INITIALIZER_RANGE,
        "intermediate_size": INTERMEDIATE,
        "layer_norm_eps": 1e-12,
        "layer_norm_type": "layer_norm",
        "logn_attention_clip1": False,
        "logn_attention_scale": False,
        "max_position_embeddings": 8192,
        "model_type": "new",
        "num_attention_heads": 2,
        "num_hidden_layers": LAYERS,
        "pack_qkv": True,
        "pad_token_id": 0,
        "position_embedding_type": "rope",
        "rope_scaling": {"factor": 2.0, "type": "ntk"},
        "rope_theta": 500000,
        "torch_dtype": "float32",
        "transformers_version": "4.39.1",
        "type_vocab_size": 0,
        "unpad_inputs": False,
        "use_memory_efficient_attention": False,
        "vocab_size": rounded(BERT_VOCAB, 64),
    }


def make_gte_base_en_v1_5(directory: Path) -> Path:
    """Alibaba-NLP/gte-base-en-v1.5: code shipped with the model (trust_remote_code):
    configuration.py (NewConfig, model_type "new") and modeling.py (NewModel: rotary with
    rope_theta 500000 and fixed NTK rope_scaling {"factor": 2.0, "type": "ntk"}, packed qkv_proj,
    GLU MLP, post-norm; weights embeddings.*, encoder.layer.N.{attention.qkv_proj,
    attention.o_proj, attn_ln, mlp.up_gate_proj, mlp.down_proj, mlp_ln}); architectures
    ["NewModel"], type_vocab_size 0 (no token type embeddings), vocab_size 30528. The real
    auto_map points at Alibaba-NLP/new-impl; here at the local files. BERT tokenizer,
    Transformer + Pooling(cls), no Normalize module (the card normalises by hand),
    max_seq_length 8192."""
    write_bert_tokenizer(directory, model_max_length=8192)
    save_custom(
        directory,
        code={"configuration.py": GTE_CONFIGURATION, "modeling.py": GTE_MODELING},
        config=_config(),
        auto_class="AutoModel",
        seed=6,
        dtype=torch.float32,
    )
    write_st(
        directory,
        [("", "Transformer"), ("1_Pooling", "Pooling")],
        max_seq_length=8192,
        st_config=st_versions("2.7.0", "4.39.1", "2.1.2+cu121"),
    )
    write_pooling(directory, HIDDEN, "cls")
    return directory
