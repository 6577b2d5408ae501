"""jina-embeddings-v2-base-en's shipped code: configuration_bert.py and modeling_bert.py
(JinaBertConfig, JinaBertModel of jinaai/jina-bert-implementation), as source text."""

from __future__ import annotations

JINA_BERT_CONFIGURATION = '''\
"""JinaBertConfig as jinaai/jina-bert-implementation's configuration_bert.py declares it: a BERT
configuration (model_type "bert") with ALiBi positions and a gated feed-forward."""

from transformers.configuration_utils import PretrainedConfig


class JinaBertConfig(PretrainedConfig):
    model_type = "bert"

    def __init__(
        self,
        vocab_size=30522,
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
        hidden_act="gelu",
        hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1,
        max_position_embeddings=512,
        type_vocab_size=2,
        initializer_range=0.02,
        layer_norm_eps=1e-12,
        pad_token_id=0,
        window_size=(-1, -1),
        position_embedding_type="alibi",
        use_cache=True,
        classifier_dropout=None,
        feed_forward_type="original",
        emb_pooler=None,
        **kwargs,
    ):
        super().__init__(pad_token_id=pad_token_id, **kwargs)
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
        self.layer_norm_eps = layer_norm_eps
        self.window_size = window_size
        self.position_embedding_type = position_embedding_type
        self.use_cache = use_cache
        self.classifier_dropout = classifier_dropout
        self.feed_forward_type = feed_forward_type
        self.emb_pooler = emb_pooler
'''

JINA_BERT_MODELING = '''\
"""A compact JinaBertModel (jinaai/jina-bert-implementation's modeling_bert.py): BERT blocks with
symmetric ALiBi attention biases instead of position embeddings and a gated MLP (GEGLU for
feed_forward_type "geglu": gated_layers -> act(gate) * rest -> wo -> LayerNorm with residual)."""

import math

import torch
from torch import nn
from torch.nn import functional as F
from transformers import PreTrainedModel
from transformers.activations import ACT2FN
from transformers.modeling_outputs import BaseModelOutputWithPoolingAndCrossAttentions

from .configuration_bert import JinaBertConfig


def alibi_slopes(num_heads):
    def power_of_two(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(num_heads).is_integer():
        return power_of_two(num_heads)
    closest = 2 ** math.floor(math.log2(num_heads))
    return power_of_two(closest) + alibi_slopes(2 * closest)[0::2][: num_heads - closest]


class JinaBertEmbeddings(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(
            config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id
        )
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, input_ids, token_type_ids=None):
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        embeddings = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        return self.LayerNorm(embeddings)


class JinaBertSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden_states, bias):
        batch, length, _ = hidden_states.shape

        def heads(x):
            return x.view(batch, length, self.num_heads, self.head_dim).transpose(1, 2)

        q = heads(self.query(hidden_states))
        k = heads(self.key(hidden_states))
        v = heads(self.value(hidden_states))
        context = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        return context.transpose(1, 2).reshape(batch, length, -1)


class JinaBertSelfOutput(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states, input_tensor):
        return self.LayerNorm(self.dense(hidden_states) + input_tensor)


class JinaBertAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.self = JinaBertSelfAttention(config)
        self.output = JinaBertSelfOutput(config)

    def forward(self, hidden_states, bias):
        return self.output(self.self(hidden_states, bias), hidden_states)


class JinaBertGLUMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.intermediate_size = config.intermediate_size
        self.gated_layers = nn.Linear(
            config.hidden_size, 2 * config.intermediate_size, bias=False
        )
        self.act = ACT2FN["gelu" if config.feed_forward_type == "geglu" else "relu"]
        self.wo = nn.Linear(config.intermediate_size, config.hidden_size)
        self.layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states):
        residual = hidden_states
        hidden_states = self.gated_layers(hidden_states)
        gated = hidden_states[..., : self.intermediate_size]
        non_gated = hidden_states[..., self.intermediate_size :]
        hidden_states = self.wo(self.act(gated) * non_gated)
        return self.layernorm(hidden_states + residual)


class JinaBertLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attention = JinaBertAttention(config)
        self.mlp = JinaBertGLUMLP(config)

    def forward(self, hidden_states, bias):
        return self.mlp(self.attention(hidden_states, bias))


class JinaBertEncoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.layer = nn.ModuleList(JinaBertLayer(config) for _ in range(config.num_hidden_layers))

    def forward(self, hidden_states, attention_mask):
        length = hidden_states.shape[1]
        positions = torch.arange(length, device=hidden_states.device, dtype=torch.float64)
        distance = (positions[None, :] - positions[:, None]).abs()
        slopes = torch.tensor(alibi_slopes(self.num_heads), dtype=torch.float64)
        alibi = -distance[None, :, :] * slopes[:, None, None].to(hidden_states.device)
        dtype = hidden_states.dtype
        blocked = (attention_mask[:, None, None, :] == 0).to(hidden_states.device)
        bias = alibi[None].to(dtype).masked_fill(blocked, torch.finfo(dtype).min)
        for layer in self.layer:
            hidden_states = layer(hidden_states, bias)
        return hidden_states


class JinaBertPreTrainedModel(PreTrainedModel):
    config_class = JinaBertConfig
    base_model_prefix = "bert"
    _no_split_modules = ["JinaBertLayer"]


class JinaBertModel(JinaBertPreTrainedModel):
    def __init__(self, config, add_pooling_layer=False):
        super().__init__(config)
        self.embeddings = JinaBertEmbeddings(config)
        self.encoder = JinaBertEncoder(config)
        self.post_init()

    def get_input_embeddings(self):
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value):
        self.embeddings.word_embeddings = value

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, **kwargs):
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        hidden_states = self.embeddings(input_ids, token_type_ids)
        hidden_states = self.encoder(hidden_states, attention_mask)
        return BaseModelOutputWithPoolingAndCrossAttentions(last_hidden_state=hidden_states)
'''
