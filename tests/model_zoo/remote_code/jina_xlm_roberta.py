"""jina-reranker-v2-base-multilingual's shipped code: configuration_xlm_roberta.py and
modeling_xlm_roberta.py (XLMRobertaFlashConfig, XLMRobertaModel,
XLMRobertaForSequenceClassification of jinaai/xlm-roberta-flash-implementation), as source text."""

from __future__ import annotations

from tests.model_zoo.remote_code.rotary import ROTARY_HELPERS

JINA_XLM_ROBERTA_CONFIGURATION = '''\
"""XLMRobertaFlashConfig as jinaai/xlm-roberta-flash-implementation's configuration_xlm_roberta.py
declares it (model_type "xlm-roberta")."""

from transformers.configuration_utils import PretrainedConfig


class XLMRobertaFlashConfig(PretrainedConfig):
    model_type = "xlm-roberta"

    def __init__(
        self,
        vocab_size=250002,
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
        hidden_act="gelu",
        hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1,
        max_position_embeddings=8194,
        type_vocab_size=1,
        initializer_range=0.02,
        layer_norm_eps=1e-05,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        position_embedding_type="absolute",
        rotary_emb_base=10000.0,
        use_cache=True,
        classifier_dropout=None,
        use_flash_attn=True,
        emb_pooler=None,
        **kwargs,
    ):
        super().__init__(
            pad_token_id=pad_token_id, bos_token_id=bos_token_id, eos_token_id=eos_token_id,
            **kwargs,
        )
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
        self.position_embedding_type = position_embedding_type
        self.rotary_emb_base = rotary_emb_base
        self.use_cache = use_cache
        self.classifier_dropout = classifier_dropout
        self.use_flash_attn = use_flash_attn
        self.emb_pooler = emb_pooler
'''

JINA_XLM_ROBERTA_MODELING = (
    '''\
"""A compact XLM-RoBERTa with a classification head (jinaai/xlm-roberta-flash-implementation's
modeling_xlm_roberta.py, as jina-reranker-v2-base-multilingual runs it): learned positions
counted from padding_idx + 1 as XLM-R does, an emb_ln after the embeddings, post-norm blocks with a
fused mixer.Wqkv projection, and RoBERTa's classification head on the first token."""

import torch
from torch import nn
from torch.nn import functional as F
from transformers import PreTrainedModel
from transformers.activations import ACT2FN
from transformers.modeling_outputs import (
    BaseModelOutputWithPoolingAndCrossAttentions,
    SequenceClassifierOutput,
)

from .configuration_xlm_roberta import XLMRobertaFlashConfig
'''
    + ROTARY_HELPERS
    + """

class XLMRobertaEmbeddings(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.padding_idx = config.pad_token_id
        self.word_embeddings = nn.Embedding(
            config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id
        )
        self.position_embeddings = nn.Embedding(
            config.max_position_embeddings, config.hidden_size, padding_idx=config.pad_token_id
        )
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)

    def forward(self, input_ids, token_type_ids=None):
        mask = input_ids.ne(self.padding_idx).int()
        position_ids = torch.cumsum(mask, dim=1) * mask + self.padding_idx
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        return (
            self.word_embeddings(input_ids)
            + self.position_embeddings(position_ids)
            + self.token_type_embeddings(token_type_ids)
        )


class MHA(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.Wqkv = nn.Linear(config.hidden_size, 3 * config.hidden_size)
        self.out_proj = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden_states, mask):
        batch, length, _ = hidden_states.shape
        qkv = self.Wqkv(hidden_states).view(batch, length, 3, self.num_heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        context = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out_proj(context.transpose(1, 2).reshape(batch, length, -1))


class Mlp(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.fc1 = nn.Linear(config.hidden_size, config.intermediate_size)
        self.fc2 = nn.Linear(config.intermediate_size, config.hidden_size)
        self.activation = ACT2FN[config.hidden_act]

    def forward(self, x):
        return self.fc2(self.activation(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.mixer = MHA(config)
        self.mlp = Mlp(config)
        self.norm1 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.norm2 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states, mask):
        hidden_states = self.norm1(hidden_states + self.mixer(hidden_states, mask))
        return self.norm2(hidden_states + self.mlp(hidden_states))


class XLMRobertaEncoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.layers = nn.ModuleList(Block(config) for _ in range(config.num_hidden_layers))

    def forward(self, hidden_states, mask):
        for layer in self.layers:
            hidden_states = layer(hidden_states, mask)
        return hidden_states


class XLMRobertaPreTrainedModel(PreTrainedModel):
    config_class = XLMRobertaFlashConfig
    base_model_prefix = "roberta"
    _no_split_modules = ["Block"]


class XLMRobertaModel(XLMRobertaPreTrainedModel):
    def __init__(self, config, add_pooling_layer=False):
        super().__init__(config)
        self.embeddings = XLMRobertaEmbeddings(config)
        self.emb_ln = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.encoder = XLMRobertaEncoder(config)
        self.post_init()

    def get_input_embeddings(self):
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value):
        self.embeddings.word_embeddings = value

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, **kwargs):
        if attention_mask is None:
            attention_mask = input_ids.ne(self.config.pad_token_id).int()
        hidden_states = self.emb_ln(self.embeddings(input_ids, token_type_ids))
        mask = key_padding_mask(attention_mask, hidden_states.dtype)
        hidden_states = self.encoder(hidden_states, mask)
        return BaseModelOutputWithPoolingAndCrossAttentions(last_hidden_state=hidden_states)


class XLMRobertaClassificationHead(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.out_proj = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, features):
        return self.out_proj(torch.tanh(self.dense(features[:, 0, :])))


class XLMRobertaForSequenceClassification(XLMRobertaPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.roberta = XLMRobertaModel(config, add_pooling_layer=False)
        self.classifier = XLMRobertaClassificationHead(config)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, **kwargs):
        hidden_states = self.roberta(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).last_hidden_state
        return SequenceClassifierOutput(logits=self.classifier(hidden_states))
"""
)
