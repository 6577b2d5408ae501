"""nomic-embed-text-v1.5's shipped code: configuration_hf_nomic_bert.py and
modeling_hf_nomic_bert.py (NomicBertConfig, NomicBertModel), as source text."""

from __future__ import annotations

from tests.model_zoo.remote_code.rotary import ROTARY_HELPERS

NOMIC_CONFIGURATION = '''\
"""NomicBertConfig as nomic-ai/nomic-bert-2048's configuration_hf_nomic_bert.py declares it: a
GPT2Config subclass, so the sizes are GPT-2's n_embd, n_layer, n_head, n_inner and n_positions."""

from transformers import GPT2Config


class NomicBertConfig(GPT2Config):
    model_type = "nomic_bert"

    def __init__(
        self,
        prenorm=False,
        parallel_block=False,
        parallel_block_tied_norm=False,
        rotary_emb_fraction=0.0,
        fused_dropout_add_ln=False,
        fused_bias_fc=False,
        use_flash_attn=False,
        use_xentropy=False,
        qkv_proj_bias=True,
        rotary_emb_base=10_000,
        rotary_emb_scale_base=None,
        rotary_emb_interleaved=False,
        mlp_fc1_bias=True,
        mlp_fc2_bias=True,
        use_rms_norm=False,
        causal=False,
        type_vocab_size=2,
        dense_seq_output=True,
        pad_vocab_size_multiple=1,
        tie_word_embeddings=True,
        rotary_scaling_factor=None,
        max_trained_positions=2048,
        **kwargs,
    ):
        self.prenorm = prenorm
        self.parallel_block = parallel_block
        self.parallel_block_tied_norm = parallel_block_tied_norm
        self.rotary_emb_fraction = rotary_emb_fraction
        self.tie_word_embeddings = tie_word_embeddings
        self.fused_dropout_add_ln = fused_dropout_add_ln
        self.fused_bias_fc = fused_bias_fc
        self.use_flash_attn = use_flash_attn
        self.use_xentropy = use_xentropy
        self.qkv_proj_bias = qkv_proj_bias
        self.rotary_emb_base = rotary_emb_base
        self.rotary_emb_scale_base = rotary_emb_scale_base
        self.rotary_emb_interleaved = rotary_emb_interleaved
        self.mlp_fc1_bias = mlp_fc1_bias
        self.mlp_fc2_bias = mlp_fc2_bias
        self.use_rms_norm = use_rms_norm
        self.causal = causal
        self.type_vocab_size = type_vocab_size
        self.dense_seq_output = dense_seq_output
        self.pad_vocab_size_multiple = pad_vocab_size_multiple
        self.rotary_scaling_factor = rotary_scaling_factor
        self.max_trained_positions = max_trained_positions

        super().__init__(**kwargs)
'''

NOMIC_MODELING = (
    '''\
"""A compact NomicBertModel (the encoder of nomic-ai/nomic-bert-2048's modeling_hf_nomic_bert.py):
post-norm BERT blocks with rotary position embeddings (no position table), one fused Wqkv
projection and a SwiGLU MLP (fc11 * silu(fc12))."""

import torch
from torch import nn
from torch.nn import functional as F
from transformers import PreTrainedModel
from transformers.modeling_outputs import BaseModelOutputWithPoolingAndCrossAttentions

from .configuration_hf_nomic_bert import NomicBertConfig
'''
    + ROTARY_HELPERS
    + """

class NomicBertEmbeddings(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.n_embd)
        self.type_vocab_size = config.type_vocab_size
        if self.type_vocab_size > 0:
            self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.n_embd)

    def forward(self, input_ids, token_type_ids=None):
        embeddings = self.word_embeddings(input_ids)
        if self.type_vocab_size > 0:
            if token_type_ids is None:
                token_type_ids = torch.zeros_like(input_ids)
            embeddings = embeddings + self.token_type_embeddings(token_type_ids)
        return embeddings


class NomicBertAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_heads = config.n_head
        self.head_dim = config.n_embd // config.n_head
        self.rotary_dim = int(self.head_dim * config.rotary_emb_fraction)
        self.rotary_emb_base = config.rotary_emb_base
        self.Wqkv = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.qkv_proj_bias)
        self.out_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.qkv_proj_bias)

    def forward(self, hidden_states, mask):
        batch, length, _ = hidden_states.shape
        qkv = self.Wqkv(hidden_states).view(batch, length, 3, self.num_heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        steps = torch.arange(0, self.rotary_dim, 2, dtype=torch.float64)
        q, k = apply_rotary(q, k, 1.0 / (self.rotary_emb_base ** (steps / self.rotary_dim)))
        context = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out_proj(context.transpose(1, 2).reshape(batch, length, -1))


class NomicBertMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.fc11 = nn.Linear(config.n_embd, config.n_inner, bias=config.mlp_fc1_bias)
        self.fc12 = nn.Linear(config.n_embd, config.n_inner, bias=config.mlp_fc1_bias)
        self.fc2 = nn.Linear(config.n_inner, config.n_embd, bias=config.mlp_fc2_bias)

    def forward(self, x):
        return self.fc2(self.fc11(x) * F.silu(self.fc12(x)))


class NomicBertBlock(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attn = NomicBertAttention(config)
        self.mlp = NomicBertMLP(config)
        self.norm1 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.norm2 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)

    def forward(self, hidden_states, mask):
        hidden_states = self.norm1(hidden_states + self.attn(hidden_states, mask))
        return self.norm2(hidden_states + self.mlp(hidden_states))


class NomicBertEncoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.layers = nn.ModuleList(NomicBertBlock(config) for _ in range(config.n_layer))

    def forward(self, hidden_states, mask):
        for layer in self.layers:
            hidden_states = layer(hidden_states, mask)
        return hidden_states


class NomicBertPreTrainedModel(PreTrainedModel):
    config_class = NomicBertConfig
    base_model_prefix = "model"
    _no_split_modules = ["NomicBertBlock"]


class NomicBertModel(NomicBertPreTrainedModel):
    def __init__(self, config, add_pooling_layer=False):
        super().__init__(config)
        self.embeddings = NomicBertEmbeddings(config)
        self.emb_ln = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.encoder = NomicBertEncoder(config)
        self.post_init()

    def get_input_embeddings(self):
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value):
        self.embeddings.word_embeddings = value

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, **kwargs):
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        hidden_states = self.emb_ln(self.embeddings(input_ids, token_type_ids))
        mask = key_padding_mask(attention_mask, hidden_states.dtype)
        hidden_states = self.encoder(hidden_states, mask)
        return BaseModelOutputWithPoolingAndCrossAttentions(last_hidden_state=hidden_states)
"""
)
