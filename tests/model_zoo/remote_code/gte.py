"""gte-base-en-v1.5's shipped code: configuration.py and modeling.py (NewConfig, NewModel of
Alibaba-NLP/new-impl), as source text."""

from __future__ import annotations

from tests.model_zoo.remote_code.rotary import ROTARY_HELPERS

GTE_CONFIGURATION = '''\
"""NewConfig as Alibaba-NLP/new-impl's configuration.py declares it (model_type "new")."""

from transformers.configuration_utils import PretrainedConfig


class NewConfig(PretrainedConfig):
    model_type = "new"

    def __init__(
        self,
        vocab_size=30528,
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
        hidden_act="gelu",
        hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.0,
        max_position_embeddings=2048,
        type_vocab_size=1,
        initializer_range=0.02,
        layer_norm_type="layer_norm",
        layer_norm_eps=1e-12,
        position_embedding_type="rope",
        rope_theta=10000.0,
        rope_scaling=None,
        classifier_dropout=None,
        pack_qkv=True,
        unpad_inputs=False,
        use_memory_efficient_attention=False,
        logn_attention_scale=False,
        logn_attention_clip1=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.hidden_act = hidden_act
        self.intermediate_size = intermediate_size
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.max_position_embeddings = max_position_embeddings
        self.type_vocab_size = type_vocab_size
        self.initializer_range = initializer_range
        self.layer_norm_type = layer_norm_type
        self.layer_norm_eps = layer_norm_eps
        self.position_embedding_type = position_embedding_type
        self.rope_theta = rope_theta
        self.rope_scaling = rope_scaling
        self.classifier_dropout = classifier_dropout
        self.pack_qkv = pack_qkv
        self.unpad_inputs = unpad_inputs
        self.use_memory_efficient_attention = use_memory_efficient_attention
        self.logn_attention_scale = logn_attention_scale
        self.logn_attention_clip1 = logn_attention_clip1
'''

GTE_MODELING = (
    '''\
"""A compact NewModel (Alibaba-NLP/new-impl's modeling.py, the gte-*-v1.5 encoder): post-norm
blocks with rotary position embeddings (fixed NTK scaling from rope_scaling), a packed qkv_proj, a
GLU MLP (gelu(gate) * up, from one up_gate_proj) and no token type embeddings when
type_vocab_size is 0."""

import torch
from torch import nn
from torch.nn import functional as F
from transformers import PreTrainedModel
from transformers.activations import ACT2FN
from transformers.modeling_outputs import BaseModelOutputWithPooling

from .configuration import NewConfig
'''
    + ROTARY_HELPERS
    + """

def rope_inv_freq(config):
    dim = config.hidden_size // config.num_attention_heads
    base = config.rope_theta
    scaling = getattr(config, "rope_scaling", None) or {}
    factor = float(scaling.get("factor", 1.0))
    if scaling.get("type", scaling.get("rope_type")) == "ntk":
        # new-impl's NTKScalingRotaryEmbedding builds its cache for max_position_embeddings *
        # factor positions, which always takes its scaled branch: base * factor, then / factor^(2/d)
        base = base * factor
    steps = torch.arange(0, dim, 2, dtype=torch.float64)
    inv_freq = 1.0 / (base ** (steps / dim))
    if scaling.get("type", scaling.get("rope_type")) == "ntk":
        inv_freq = inv_freq / factor ** (2 / dim)
    return inv_freq


class NewEmbeddings(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(
            config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id
        )
        self.type_vocab_size = config.type_vocab_size
        if self.type_vocab_size > 0:
            self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, input_ids, token_type_ids=None):
        embeddings = self.word_embeddings(input_ids)
        if self.type_vocab_size > 0:
            if token_type_ids is None:
                token_type_ids = torch.zeros_like(input_ids)
            embeddings = embeddings + self.token_type_embeddings(token_type_ids)
        return self.LayerNorm(embeddings)


class NewAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.qkv_proj = nn.Linear(config.hidden_size, 3 * config.hidden_size, bias=True)
        self.o_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=True)

    def forward(self, hidden_states, mask, inv_freq):
        batch, length, _ = hidden_states.shape
        qkv = self.qkv_proj(hidden_states).view(batch, length, 3, self.num_heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        q, k = apply_rotary(q, k, inv_freq)
        context = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.o_proj(context.transpose(1, 2).reshape(batch, length, -1))


class NewGatedMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.intermediate_size = config.intermediate_size
        self.up_gate_proj = nn.Linear(config.hidden_size, 2 * config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=True)
        self.act_fn = ACT2FN[config.hidden_act]

    def forward(self, hidden_states):
        up, gate = torch.split(
            self.up_gate_proj(hidden_states), [self.intermediate_size] * 2, dim=-1
        )
        return self.down_proj(self.act_fn(gate) * up)


class NewLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attention = NewAttention(config)
        self.mlp = NewGatedMLP(config)
        self.attn_ln = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.mlp_ln = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states, mask, inv_freq):
        hidden_states = self.attn_ln(hidden_states + self.attention(hidden_states, mask, inv_freq))
        return self.mlp_ln(hidden_states + self.mlp(hidden_states))


class NewEncoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.layer = nn.ModuleList(NewLayer(config) for _ in range(config.num_hidden_layers))

    def forward(self, hidden_states, mask, inv_freq):
        for layer in self.layer:
            hidden_states = layer(hidden_states, mask, inv_freq)
        return hidden_states


class NewPreTrainedModel(PreTrainedModel):
    config_class = NewConfig
    base_model_prefix = "new"
    _no_split_modules = ["NewLayer"]


class NewModel(NewPreTrainedModel):
    def __init__(self, config, add_pooling_layer=False):
        super().__init__(config)
        self.embeddings = NewEmbeddings(config)
        self.encoder = NewEncoder(config)
        self.post_init()

    def get_input_embeddings(self):
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value):
        self.embeddings.word_embeddings = value

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, **kwargs):
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        hidden_states = self.embeddings(input_ids, token_type_ids)
        mask = key_padding_mask(attention_mask, hidden_states.dtype)
        hidden_states = self.encoder(hidden_states, mask, rope_inv_freq(self.config))
        return BaseModelOutputWithPooling(last_hidden_state=hidden_states)
"""
)
