"""Tiny random checkpoints in the on-disk layouts of popular embedding models and rerankers.

Each `make_<name>(directory)` writes a 2-layer, 32-wide model (64-wide attention projections where
the architecture's head_dim asks for it, as Qwen3's) with seeded random weights in the files the
hub repository it imitates ships: config.json (its `architectures`, `model_type`, its own config
keys, `auto_map` and the custom code files where the real repository runs code of its own), the
weights in the real checkpoint's dtype and key prefix, the sentence-transformers files
(modules.json, sentence_bert_config.json, config_sentence_transformers.json with the real prompts,
1_Pooling, Dense folders, heads such as BGE-M3's colbert_linear.pt) and a tokenizer of the family's
type with its special tokens. `ZOO` at the bottom lists them for the tests; `reference_embeddings`,
`reference_scores` and the `bge_m3_*` functions compute what a correct server must return, with
sentence-transformers (in float32) or with the published formula of the model card (in float64, one
input at a time), never with poolserve code.

Tokenizers that are not BERT's WordPiece are trained here, offline and deterministically, with the
`tokenizers` library on text every machine has: the METADATA (the README) of a fixed, sorted list
of pure-Python packages the project pins, the bundled all-MiniLM-L6-v2 README and a few lines
written below. BPE training is deterministic; the `tokenizers` Unigram trainer is not (two runs
give other pieces), so the Unigram (SentencePiece-style) vocabularies of T5 and XLM-RoBERTa are the
pieces of a BPE trained with Metaspace, scored by how often that BPE uses them. The trained model
is then wrapped in the family's transformers class (Qwen2Tokenizer, GemmaTokenizer, LlamaTokenizer,
T5Tokenizer, XLMRobertaTokenizer, MPNetTokenizer) so that tokenizer.json holds that class's
normalizer, pre-tokenizer, decoder and post-processor, and tokenizer_config.json /
special_tokens_map.json are written as the hub repositories carry them (transformers 4.x style,
with `added_tokens_decoder`). transformers 5 rebuilds the pipeline of those classes from the class
and takes only the vocabulary, merges and post-processor from tokenizer.json, so a server that
reads tokenizer.json with `tokenizers` directly and one that uses `AutoTokenizer` agree on these
files.

Weights are drawn with `initializer_range` 0.2 (tiny_models.py says why) and stored in the dtype
the real checkpoint has (bfloat16 for Qwen3, float16 for e5-mistral and the T5 models); config.json
is rewritten in the transformers 4.x form hub repositories have (`torch_dtype`, `rope_theta`,
`rope_local_base_freq`, `global_rope_theta`, ...) and read back with `AutoConfig` to check that
transformers 5 sees the configuration the weights were made for. transformers 5 loads a model in
the dtype its config.json names unless told otherwise (`dtype="auto"` is the default), so the
references pass `dtype=torch.float32` explicitly.
"""

from __future__ import annotations

import functools
import json
import math
import shutil
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import distribution
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tests.tiny_models import (
    INITIALIZER_RANGE,
    SEED,
    _read_json,
    _write_json,
    make_cross_encoder,
    minilm_path,
)

HIDDEN = 32
INTERMEDIATE = 64
LAYERS = 2
TRAINED_VOCAB = 4000  # the BPE vocabularies trained here (specials and byte tokens included)
UNIGRAM_PIECES = 3000  # the pieces of the T5 / XLM-RoBERTa Unigram vocabularies
BERT_VOCAB = 30522  # bert-base-uncased's WordPiece vocabulary, as the bundled MiniLM ships it
MATRYOSHKA_TRUNCATE_DIM = (
    16  # config_sentence_transformers.json's truncate_dim of the copy of mxbai
)
BIG_MODEL_MAX_LENGTH = 1000000000000000019884624838656  # transformers' VERY_LARGE_INTEGER

# Packages whose METADATA (their README) is the tokenizer training text: pure-Python wheels the
# project pins, so the text is byte-identical on every machine (compiled wheels such as torch or
# numpy carry per-platform license texts). Sorted, read in this order.
CORPUS_DISTRIBUTIONS = (
    "fastapi",
    "huggingface_hub",
    "pydantic",
    "sentence_transformers",
    "tqdm",
    "transformers",
    "uvicorn",
)
# A few lines in other scripts, so that the multilingual (XLM-RoBERTa) vocabularies have pieces
# outside ASCII, and the words the LLM rerankers score by, so that each is one token.
_EXTRA_TEXT = """\
Der schnelle braune Fuchs springt über den faulen Hund, während der Fluss zum Meer fließt.
Le renard brun rapide saute par-dessus le chien paresseux; la rivière coule vers la mer.
El rápido zorro marrón salta sobre el perro perezoso mientras el río corre hacia el mar.
Быстрая коричневая лиса прыгает через ленивую собаку, а река течёт к морю.
敏捷的棕色狐狸跳过了懒狗，河水流向大海。
素早い茶色の狐がのろまな犬を飛び越え、川は海へと流れていく。
Ο γρήγορος καφέ αλεπού πηδά πάνω από το τεμπέλικο σκυλί.
"""
_SCORED_WORDS = ("yes", "no", "Yes", "No")

ST_MODULES = "sentence_transformers.models."
IDENTITY = "torch.nn.modules.linear.Identity"

# The ChatML markup Qwen's chat templates write for plain messages (roles, <|im_start|>,
# <|im_end|>), with the generation prompt; a conversation must not be empty.
CHATML_TEMPLATE = (
    "{%- if not messages %}{{ raise_exception('the conversation is empty') }}{%- endif %}"
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"
)

# Qwen3-Reranker's model card (https://huggingface.co/Qwen/Qwen3-Reranker-0.6B), verbatim.
QWEN3_RERANKER_PREFIX = (
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and "
    'the Instruct provided. Note that the answer can only be "yes" or "no".<|im_end|>\n'
    "<|im_start|>user\n"
)
QWEN3_RERANKER_SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
QWEN3_RERANKER_INSTRUCTION = (
    "Given a web search query, retrieve relevant passages that answer the query"
)
QWEN3_RERANKER_MAX_LENGTH = 8192
# FlagEmbedding's FlagLLMReranker (bge-reranker-v2-gemma), its defaults.
BGE_GEMMA_PROMPT = (
    "Given a query A and a passage B, determine whether the passage contains an answer to the "
    "query by providing a prediction of either 'Yes' or 'No'."
)
BGE_GEMMA_SEPARATOR = "\n"
BGE_GEMMA_MAX_LENGTH = 512
# FlagEmbedding's BGEM3FlagModel.compute_score default weights_for_different_modes.
BGE_M3_WEIGHTS = (0.4, 0.2, 0.4)  # dense, sparse, colbert
BGE_M3_MAX_LENGTH = 8192

QWEN3_EMBEDDING_PROMPTS = {
    "query": "Instruct: Given a web search query, retrieve relevant passages that answer the query"
    "\nQuery:",
    "document": "",
}
E5_MISTRAL_PROMPTS = {
    "web_search_query": "Instruct: Given a web search query, retrieve relevant passages that "
    "answer the query\nQuery: ",
    "sts_query": "Instruct: Retrieve semantically similar text.\nQuery: ",
    "summarization_query": "Instruct: Given a news summary, retrieve other semantically similar "
    "summaries\nQuery: ",
    "bitext_query": "Instruct: Retrieve parallel sentences.\nQuery: ",
}
GTE_QWEN2_PROMPTS = {
    "query": "Instruct: Given a web search query, retrieve relevant passages that answer the "
    "query\nQuery: ",
}
NOMIC_PROMPTS = {
    "search_query": "search_query: ",
    "search_document": "search_document: ",
    "classification": "classification: ",
    "clustering": "clustering: ",
}
RETRIEVAL_QUERY_PROMPT = "Represent this sentence for searching relevant passages: "
E5_PROMPTS = {"query": "query: ", "passage": "passage: "}
STELLA_PROMPTS = {
    "s2p_query": "Instruct: Given a web search query, retrieve relevant passages that answer the "
    "query.\nQuery: ",
    "s2s_query": "Instruct: Retrieve semantically similar text.\nQuery: ",
}
MODERNBERT_EMBED_PROMPTS = {"query": "search_query: ", "document": "search_document: "}
EMBEDDINGGEMMA_PROMPTS = {
    "query": "task: search result | query: ",
    "document": "title: none | text: ",
    "BitextMining": "task: search result | query: ",
    "Clustering": "task: clustering | query: ",
    "Classification": "task: classification | query: ",
    "InstructionRetrieval": "task: code retrieval | query: ",
    "MultilabelClassification": "task: classification | query: ",
    "PairClassification": "task: sentence similarity | query: ",
    "Reranking": "task: search result | query: ",
    "Retrieval": "task: search result | query: ",
    "Retrieval-query": "task: search result | query: ",
    "Retrieval-document": "title: none | text: ",
    "STS": "task: sentence similarity | query: ",
    "Summarization": "task: summarization | query: ",
}


# --- the code shipped with trust_remote_code models ---------------------------------------------
#
# Compact re-implementations of the real repositories' classes, under their class names, module
# file names and weight names, without flash-attention, unpadding or training heads. Every file
# imports only torch and transformers: nothing is fetched. Rotary frequencies and ALiBi slopes are
# computed in forward, not kept in non-persistent buffers: transformers 5 builds a model on the
# meta device and then fills non-persistent buffers with `torch.empty_like` and only
# `_init_weights` writes them, so a custom class's buffer made in __init__ holds garbage after
# from_pretrained.

_NOMIC_CONFIGURATION = '''\
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

_ROTARY_HELPERS = '''
def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(q, k, inv_freq):
    """Non-interleaved (GPT-NeoX style) rotary embedding of q and k, [batch, heads, seq, dim],
    over the first 2 * len(inv_freq) channels of each head; positions are 0 .. seq - 1."""
    rotary_dim = 2 * inv_freq.shape[0]
    positions = torch.arange(q.shape[-2], dtype=torch.float64, device=q.device)
    freqs = torch.outer(positions, inv_freq.to(device=q.device, dtype=torch.float64))
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().to(q.dtype), emb.sin().to(q.dtype)

    def rotate(x):
        x_rot, x_pass = x[..., :rotary_dim], x[..., rotary_dim:]
        return torch.cat((x_rot * cos + rotate_half(x_rot) * sin, x_pass), dim=-1)

    return rotate(q), rotate(k)


def key_padding_mask(attention_mask, dtype):
    """[batch, seq] 1/0 -> an additive [batch, 1, 1, seq] mask for scaled_dot_product_attention."""
    blocked = attention_mask[:, None, None, :] == 0
    return torch.zeros(blocked.shape, dtype=dtype, device=attention_mask.device).masked_fill(
        blocked, torch.finfo(dtype).min
    )
'''

_NOMIC_MODELING = (
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
    + _ROTARY_HELPERS
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

_GTE_CONFIGURATION = '''\
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

_GTE_MODELING = (
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
    + _ROTARY_HELPERS
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

_JINA_CONFIGURATION = '''\
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

_JINA_MODELING = '''\
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

_JINA_RERANKER_CONFIGURATION = '''\
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

_JINA_RERANKER_MODELING = (
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
    + _ROTARY_HELPERS
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


# --- training text and trained tokenizers -------------------------------------------------------


@functools.cache
def _corpus() -> tuple[str, ...]:
    """The tokenizer training lines: `CORPUS_DISTRIBUTIONS`' METADATA, the bundled MiniLM README,
    `_EXTRA_TEXT`, and each of `_SCORED_WORDS` alone on a line 50 times (alone, so that BPE learns
    them without a leading space, as the rerankers look them up)."""
    lines: list[str] = []
    for name in CORPUS_DISTRIBUTIONS:
        text = distribution(name).read_text("METADATA")
        if not text:
            raise RuntimeError(f"{name} is installed without METADATA: cannot train tokenizers")
        lines.extend(line for line in text.splitlines() if line.strip())
    readme = (minilm_path() / "README.md").read_text(encoding="utf-8")
    lines.extend(line for line in readme.splitlines() if line.strip())
    lines.extend(_EXTRA_TEXT.splitlines())
    lines.extend(_SCORED_WORDS * 50)
    return tuple(lines)


def _train_bpe(
    *,
    normalizer: Any,
    pre_tokenizer: Any,
    vocab_size: int,
    special_tokens: Sequence[str] = (),
    initial_alphabet: Sequence[str] = (),
    limit_alphabet: int | None = None,
) -> tuple[dict[str, int], tuple[tuple[str, str], ...]]:
    """A BPE vocabulary (special tokens first, in order) and its merges, trained on `_corpus()`."""
    from tokenizers import Tokenizer, models, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizer
    tokenizer.pre_tokenizer = pre_tokenizer
    options: dict[str, Any] = {"limit_alphabet": limit_alphabet} if limit_alphabet else {}
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(special_tokens),
        initial_alphabet=list(initial_alphabet),
        show_progress=False,
        **options,
    )
    tokenizer.train_from_iterator(_corpus(), trainer)
    model = json.loads(tokenizer.to_str())["model"]
    pairs = [m if isinstance(m, list) else m.split(" ", 1) for m in model["merges"]]
    merges = tuple((str(a), str(b)) for a, b in pairs)
    return dict(model["vocab"]), merges


def _byte_tokens() -> list[str]:
    return [f"<0x{i:02X}>" for i in range(256)]


def _frequent_characters(count: int, *, space: str) -> list[str]:
    """The `count` most frequent characters of the corpus with spaces written as `space`, ties by
    code point: the alphabet of the byte-fallback BPEs. (BpeTrainer's own `limit_alphabet` breaks
    ties between equally frequent characters in hash order, which differs between processes.)"""
    counts: Counter[str] = Counter()
    for line in _corpus():
        counts.update(line.replace(" ", space))
    counts[space] += 1  # Metaspace's prepended "▁" is in the alphabet even without a space
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return [character for character, _ in ranked[:count]]


@functools.cache
def _qwen_bpe() -> tuple[dict[str, int], tuple[tuple[str, str], ...]]:
    """Qwen2's byte-level BPE: NFC, Qwen's split regex, ByteLevel without prefix space; 3995 tokens
    so that the five added tokens make 4000."""
    from tokenizers import Regex, normalizers, pre_tokenizers
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    return _train_bpe(
        normalizer=normalizers.NFC(),
        pre_tokenizer=pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        ),
        vocab_size=TRAINED_VOCAB - 5,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )


GEMMA_SPECIALS = ("<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>")
LLAMA_SPECIALS = ("<unk>", "<s>", "</s>")


@functools.cache
def _sentencepiece_bpe(family: str) -> tuple[dict[str, int], tuple[tuple[str, str], ...]]:
    """SentencePiece-style BPE with byte fallback: "▁" for spaces, the family's special tokens
    first, then the 256 <0xXX> byte tokens, then the 150 most frequent characters and the merges
    (rarer characters fall back to bytes). family "gemma": Gemma's spaces-to-▁ normalizer, no
    prefix space; "llama": Llama's Metaspace with a "▁" prepended to the first word. Trained word
    by word (split before each "▁"), which gives the merges the unsplit tokenizer applies to a
    whole text."""
    from tokenizers import normalizers, pre_tokenizers

    if family == "gemma":
        normalizer: Any = normalizers.Replace(" ", "▁")
        pre_tokenizer: Any = pre_tokenizers.Split("▁", behavior="merged_with_next")
        specials: Sequence[str] = GEMMA_SPECIALS
    elif family == "llama":
        normalizer = None
        pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
        specials = LLAMA_SPECIALS
    else:
        raise ValueError(f"unknown SentencePiece BPE family {family!r}")
    alphabet = _frequent_characters(150, space="▁")
    return _train_bpe(
        normalizer=normalizer,
        pre_tokenizer=pre_tokenizer,
        vocab_size=TRAINED_VOCAB,
        special_tokens=[*specials, *_byte_tokens()],
        initial_alphabet=alphabet,
        limit_alphabet=len(alphabet),  # exactly the initial alphabet: it outranks every count
    )


MODERNBERT_ADDED = ("<|endoftext|>", "[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]")


@functools.cache
def _modernbert_bpe() -> tuple[dict[str, int], tuple[tuple[str, str], ...]]:
    """ModernBERT's (OLMo's, GPT-NeoX style) byte-level BPE: <|padding|> first, ByteLevel with
    its own regex; [UNK] [CLS] [SEP] [PAD] [MASK] come after the vocabulary, as ModernBERT's."""
    from tokenizers import normalizers, pre_tokenizers

    return _train_bpe(
        normalizer=normalizers.NFC(),
        pre_tokenizer=pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        vocab_size=TRAINED_VOCAB - len(MODERNBERT_ADDED),
        special_tokens=["<|padding|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )


@functools.cache
def _unigram_pieces() -> tuple[tuple[str, float], ...]:
    """SentencePiece-style Unigram pieces ("▁" marks a word start) with log-probability scores.

    The `tokenizers` Unigram trainer is not deterministic, so the pieces are those of a BPE trained
    with T5's / XLM-R's pre-tokenizer (WhitespaceSplit + Metaspace), each scored log(count / total)
    by how often that BPE uses it on the corpus (unused pieces one below the rarest), sorted by
    score as a SentencePiece vocabulary is."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.WhitespaceSplit(),
            pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always"),
        ]
    )
    vocab, merges = _train_bpe(
        normalizer=None, pre_tokenizer=pre_tokenizer, vocab_size=UNIGRAM_PIECES
    )
    bpe = Tokenizer(models.BPE(vocab=vocab, merges=list(merges)))
    bpe.pre_tokenizer = pre_tokenizer
    counts = dict.fromkeys(vocab, 0)
    id_to_piece = {i: piece for piece, i in vocab.items()}
    for encoding in bpe.encode_batch(list(_corpus())):
        for token_id in encoding.ids:
            counts[id_to_piece[token_id]] += 1
    total = sum(counts.values())
    scores = {piece: math.log(count / total) for piece, count in counts.items() if count}
    floor = min(scores.values()) - 1.0
    scored = [(piece, scores.get(piece, floor)) for piece in vocab]
    return tuple(sorted(scored, key=lambda item: (-item[1], item[0])))


# --- tokenizer files ----------------------------------------------------------------------------


def _added_tokens_decoder(directory: Path) -> dict[str, dict[str, Any]]:
    """tokenizer_config.json's `added_tokens_decoder`, from tokenizer.json's added tokens."""
    keys = ("content", "lstrip", "normalized", "rstrip", "single_word", "special")
    added = _read_json(directory / "tokenizer.json")["added_tokens"]
    return {str(token["id"]): {key: token[key] for key in keys} for token in added}


def _save_tokenizer(
    tokenizer: Any,
    directory: Path,
    config: Mapping[str, Any],
    special_tokens_map: Mapping[str, Any],
) -> None:
    """tokenizer.json as the transformers class writes it; tokenizer_config.json (with
    `added_tokens_decoder` first) and special_tokens_map.json as hub repositories carry them."""
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(str(directory))
    for name in ("chat_template.jinja", "chat_template.json"):
        (directory / name).unlink(missing_ok=True)
    _write_json(
        directory / "tokenizer_config.json",
        {"added_tokens_decoder": _added_tokens_decoder(directory), **config},
    )
    _write_json(directory / "special_tokens_map.json", dict(special_tokens_map))


def _strip_tokenizer_json_limits(directory: Path) -> None:
    """Remove tokenizer.json's truncation and padding (the bundled MiniLM's carries a fixed 128)."""
    path = directory / "tokenizer.json"
    data = _read_json(path)
    data["truncation"] = None
    data["padding"] = None
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")


BERT_SPECIALS = {
    "cls_token": "[CLS]",
    "mask_token": "[MASK]",
    "pad_token": "[PAD]",
    "sep_token": "[SEP]",
    "unk_token": "[UNK]",
}


def _write_bert_tokenizer(
    directory: Path,
    *,
    tokenizer_class: str = "BertTokenizer",
    model_max_length: int = 512,
    do_lower_case: bool = True,
) -> None:
    """bert-base-uncased's WordPiece (the bundled MiniLM's vocab.txt and tokenizer.json, without
    its truncation/padding) with a tokenizer_config.json naming `tokenizer_class`."""
    directory.mkdir(parents=True, exist_ok=True)
    source = minilm_path()
    for name in ("tokenizer.json", "vocab.txt"):
        shutil.copyfile(source / name, directory / name)
    _strip_tokenizer_json_limits(directory)
    _write_json(
        directory / "tokenizer_config.json",
        {
            "added_tokens_decoder": _added_tokens_decoder(directory),
            "clean_up_tokenization_spaces": True,
            **BERT_SPECIALS,
            "do_basic_tokenize": True,
            "do_lower_case": do_lower_case,
            "model_max_length": model_max_length,
            "never_split": None,
            "strip_accents": None,
            "tokenize_chinese_chars": True,
            "tokenizer_class": tokenizer_class,
        },
    )
    _write_json(directory / "special_tokens_map.json", BERT_SPECIALS)


def _write_mpnet_tokenizer(directory: Path) -> None:
    """all-mpnet-base-v2's: bert-base-uncased's WordPiece behind <s>=0 <pad>=1 </s>=2 <unk>=3,
    <mask> last (30526), [UNK] (104) as the unknown token; `<s> A </s>`, pairs
    `<s> A </s> </s> B </s>` (RobertaProcessing)."""
    from transformers import MPNetTokenizer

    bert = (minilm_path() / "vocab.txt").read_text(encoding="utf-8").splitlines()
    tokens = ["<s>", "<pad>", "</s>", "<unk>", *bert, "<mask>"]
    tokenizer = MPNetTokenizer(
        vocab={token: i for i, token in enumerate(tokens)}, do_lower_case=True
    )
    specials = {
        "bos_token": "<s>",
        "cls_token": "<s>",
        "eos_token": "</s>",
        "mask_token": "<mask>",
        "pad_token": "<pad>",
        "sep_token": "</s>",
        "unk_token": "[UNK]",
    }
    _save_tokenizer(
        tokenizer,
        directory,
        {
            **specials,
            "clean_up_tokenization_spaces": True,
            "do_lower_case": True,
            "model_max_length": 512,
            "strip_accents": None,
            "tokenize_chinese_chars": True,
            "tokenizer_class": "MPNetTokenizer",
        },
        specials,
    )
    (directory / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")


def _t5_vocab() -> list[tuple[str, float]]:
    pieces = [(piece, score) for piece, score in _unigram_pieces()]
    extra = [(f"<extra_id_{i}>", 0.0) for i in reversed(range(100))]
    return [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), *pieces, *extra]


def _write_t5_tokenizer(directory: Path, *, model_max_length: int = 512) -> int:
    """T5's: Unigram with Metaspace, <pad>=0 </s>=1 <unk>=2, the pieces, then <extra_id_99> ..
    <extra_id_0>; `A </s>` (no BOS). Returns the vocabulary size."""
    from transformers import T5Tokenizer

    vocab = _t5_vocab()
    tokenizer = T5Tokenizer(vocab=vocab, extra_ids=100)
    extra = [f"<extra_id_{i}>" for i in range(100)]
    specials = {"eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>"}
    _save_tokenizer(
        tokenizer,
        directory,
        {
            "additional_special_tokens": extra,
            "clean_up_tokenization_spaces": True,
            **specials,
            "extra_ids": 100,
            "model_max_length": model_max_length,
            "tokenizer_class": "T5Tokenizer",
        },
        {"additional_special_tokens": extra, **specials},
    )
    return len(vocab)


def _xlmr_vocab() -> list[tuple[str, float]]:
    pieces = [(piece, score) for piece, score in _unigram_pieces()]
    return [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), *pieces, ("<mask>", 0.0)]


def _write_xlmr_tokenizer(directory: Path, *, model_max_length: int = 512) -> int:
    """XLM-RoBERTa's: Unigram with Metaspace, <s>=0 <pad>=1 </s>=2 <unk>=3, the pieces, <mask>
    last; `<s> A </s>`, pairs `<s> A </s> </s> B </s>`. Returns the vocabulary size."""
    from transformers import XLMRobertaTokenizer

    vocab = _xlmr_vocab()
    tokenizer = XLMRobertaTokenizer(vocab=vocab)
    specials = {
        "bos_token": "<s>",
        "cls_token": "<s>",
        "eos_token": "</s>",
        "mask_token": "<mask>",
        "pad_token": "<pad>",
        "sep_token": "</s>",
        "unk_token": "<unk>",
    }
    _save_tokenizer(
        tokenizer,
        directory,
        {
            **specials,
            "clean_up_tokenization_spaces": True,
            "model_max_length": model_max_length,
            "sp_model_kwargs": {},
            "tokenizer_class": "XLMRobertaTokenizer",
        },
        specials,
    )
    return len(vocab)


QWEN_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def _write_qwen_tokenizer(
    directory: Path,
    *,
    append_endoftext: bool,
    eos_token: str = "<|im_end|>",
    padding_side: str | None = None,
    model_max_length: int = 131072,
) -> dict[str, int]:
    """Qwen2/Qwen3's byte-level BPE with <|endoftext|>, <|im_start|>, <|im_end|> added after the
    vocabulary (special) and <think>, </think> (not special), tokenizer_class Qwen2Tokenizer,
    add_bos_token false, and vocab.json / merges.txt beside tokenizer.json. With
    `append_endoftext` tokenizer.json's post-processor is Qwen3-Embedding's TemplateProcessing
    `$A <|endoftext|>`; otherwise nothing is added (Qwen3-Reranker). Returns the ids of
    <|endoftext|>, <|im_start|>, <|im_end|> and the vocabulary size ("size")."""
    from tokenizers import AddedToken, processors
    from transformers import Qwen2Tokenizer

    base, merges = _qwen_bpe()
    vocab = dict(base)
    for token in QWEN_SPECIALS:
        vocab[token] = len(vocab)
    extra_special = ["<|im_start|>", "<|im_end|>"]
    tokenizer = Qwen2Tokenizer(
        vocab=vocab,
        merges=list(merges),
        unk_token=None,
        bos_token=None,
        eos_token=eos_token,
        pad_token="<|endoftext|>",
        extra_special_tokens=extra_special,
    )
    tokenizer.add_tokens(
        [AddedToken(t, special=False, normalized=False) for t in ("<think>", "</think>")]
    )
    endoftext = vocab["<|endoftext|>"]
    if append_endoftext:
        tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
            single="$A:0 <|endoftext|>:0",
            pair="$A:0 <|endoftext|>:0 $B:1 <|endoftext|>:1",
            special_tokens=[("<|endoftext|>", endoftext)],
        )
    config: dict[str, Any] = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "additional_special_tokens": extra_special,
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": eos_token,
        "errors": "replace",
        "model_max_length": model_max_length,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    if padding_side is not None:
        config["padding_side"] = padding_side
    _save_tokenizer(
        tokenizer,
        directory,
        config,
        {
            "additional_special_tokens": extra_special,
            "eos_token": eos_token,
            "pad_token": "<|endoftext|>",
        },
    )
    _write_json(directory / "vocab.json", base)
    (directory / "merges.txt").write_text(
        "#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges), encoding="utf-8"
    )
    size = len(_read_json(directory / "tokenizer.json")["model"]["vocab"]) + 2  # + <think>s
    return {**{token: vocab[token] for token in QWEN_SPECIALS}, "size": size}


def _write_gemma_tokenizer(
    directory: Path,
    *,
    add_eos_token: bool,
    padding_side: str | None = None,
    model_max_length: int = BIG_MODEL_MAX_LENGTH,
) -> int:
    """Gemma's SentencePiece BPE with byte fallback: <pad>=0 <eos>=1 <bos>=2 <unk>=3 <mask>=4,
    <start_of_turn>, <end_of_turn>, the byte tokens, the pieces; spaces normalised to "▁" with no
    prefix space; `<bos> A` (and ` <eos>` with `add_eos_token`, as embeddinggemma). Returns the
    vocabulary size."""
    from transformers import GemmaTokenizer

    vocab, merges = _sentencepiece_bpe("gemma")
    extra_special = ["<start_of_turn>", "<end_of_turn>"]
    tokenizer = GemmaTokenizer(
        vocab=dict(vocab),
        merges=list(merges),
        add_bos_token=True,
        add_eos_token=add_eos_token,
        extra_special_tokens=extra_special,
    )
    specials = {
        "bos_token": "<bos>",
        "eos_token": "<eos>",
        "mask_token": "<mask>",
        "pad_token": "<pad>",
        "unk_token": "<unk>",
    }
    config: dict[str, Any] = {
        "add_bos_token": True,
        "add_eos_token": add_eos_token,
        "additional_special_tokens": extra_special,
        **specials,
        "clean_up_tokenization_spaces": False,
        "model_max_length": model_max_length,
        "sp_model_kwargs": {},
        "spaces_between_special_tokens": False,
        "tokenizer_class": "GemmaTokenizer",
        "use_default_system_prompt": False,
    }
    if padding_side is not None:
        config["padding_side"] = padding_side
    _save_tokenizer(
        tokenizer, directory, config, {"additional_special_tokens": extra_special, **specials}
    )
    return len(vocab)


def _write_llama_tokenizer(
    directory: Path, *, add_eos_token: bool, model_max_length: int = BIG_MODEL_MAX_LENGTH
) -> int:
    """Llama / Mistral's SentencePiece BPE with byte fallback: <unk>=0 <s>=1 </s>=2, the byte
    tokens, the pieces; Metaspace with "▁" prepended to the first word; `<s> A` (and ` </s>` with
    `add_eos_token`, as e5-mistral-7b-instruct's sentence-transformers version). Pads with </s>.
    Returns the vocabulary size."""
    from transformers import LlamaTokenizer

    vocab, merges = _sentencepiece_bpe("llama")
    tokenizer = LlamaTokenizer(
        vocab=dict(vocab),
        merges=list(merges),
        add_bos_token=True,
        add_eos_token=add_eos_token,
        pad_token="</s>",
    )
    specials = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "</s>", "unk_token": "<unk>"}
    _save_tokenizer(
        tokenizer,
        directory,
        {
            "add_bos_token": True,
            "add_eos_token": add_eos_token,
            "additional_special_tokens": [],
            **specials,
            "clean_up_tokenization_spaces": False,
            "model_max_length": model_max_length,
            "sp_model_kwargs": {},
            "spaces_between_special_tokens": False,
            "tokenizer_class": "LlamaTokenizer",
            "use_default_system_prompt": False,
        },
        specials,
    )
    return len(vocab)


def _write_modernbert_tokenizer(directory: Path, *, model_max_length: int = 8192) -> dict[str, int]:
    """ModernBERT's: byte-level BPE (tokenizer_class PreTrainedTokenizerFast, so transformers
    loads tokenizer.json as it is), <|padding|>=0, then <|endoftext|> [UNK] [CLS] [SEP] [PAD]
    [MASK] after the vocabulary; `[CLS] A [SEP]`, pairs `[CLS] A [SEP] B [SEP]`; no token type ids.
    Returns the ids of the added tokens and the vocabulary size ("size")."""
    from tokenizers import (
        AddedToken,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
    )
    from transformers import PreTrainedTokenizerFast

    vocab, merges = _modernbert_bpe()
    vocab = dict(vocab)
    backend = Tokenizer(models.BPE(vocab=vocab, merges=list(merges)))
    backend.normalizer = normalizers.NFC()
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(
        [AddedToken("<|padding|>", special=True, normalized=False)]
        + [
            AddedToken(t, special=True, normalized=False, lstrip=t == "[MASK]")
            for t in MODERNBERT_ADDED
        ]
    )
    ids = {token: backend.token_to_id(token) for token in MODERNBERT_ADDED}
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0",
        pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", ids["[CLS]"]), ("[SEP]", ids["[SEP]"])],
    )
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend)
    specials = dict(BERT_SPECIALS)
    _save_tokenizer(
        tokenizer,
        directory,
        {
            "clean_up_tokenization_spaces": True,
            **specials,
            "model_input_names": ["input_ids", "attention_mask"],
            "model_max_length": model_max_length,
            "tokenizer_class": "PreTrainedTokenizerFast",
        },
        specials,
    )
    return {**ids, "size": len(vocab) + len(MODERNBERT_ADDED)}


# --- weights, config.json and sentence-transformers files ---------------------------------------


def _seed(offset: int) -> None:
    torch.manual_seed(SEED + 1000 + offset)


def _rounded(size: int, multiple: int) -> int:
    return -(-size // multiple) * multiple


def _save_model(
    model: Any,
    directory: Path,
    *,
    dtype: torch.dtype,
    transformers_version: str,
    keep_dtype_key: bool = True,
    layer_type_rope: Mapping[str, str] | None = None,
    drop: Sequence[str] = (),
    **updates: Any,
) -> None:
    """`save_pretrained` in `dtype`, then config.json in the transformers 4.x form hub repositories
    carry: `torch_dtype` (or none, for repositories older than that key), rope_parameters back to
    `rope_theta` / `rope_scaling` (or, per layer type, to the keys `layer_type_rope` names),
    `transformers_version`, `updates`, keys sorted. `AutoConfig` then reads it back and must see
    the configuration the weights were made with."""
    from transformers import AutoConfig

    directory.mkdir(parents=True, exist_ok=True)
    model.to(dtype).save_pretrained(str(directory))
    path = directory / "config.json"
    config = _read_json(path)
    stored_dtype = config.pop("dtype", None) or str(dtype).removeprefix("torch.")
    config.pop("torch_dtype", None)
    if keep_dtype_key:
        config["torch_dtype"] = stored_dtype
    rope = config.pop("rope_parameters", None)
    if rope is not None and "rope_theta" in rope:
        config["rope_theta"] = rope["rope_theta"]
        config["rope_scaling"] = None
    elif rope is not None:
        if layer_type_rope is None:
            raise ValueError(f"per-layer-type rope_parameters {rope} need layer_type_rope")
        for layer_type, key in layer_type_rope.items():
            config[key] = rope[layer_type]["rope_theta"]
    for key in drop:
        config.pop(key, None)
    config.update(updates, transformers_version=transformers_version)
    _write_json(path, dict(sorted(config.items())))

    loaded = AutoConfig.from_pretrained(str(directory))
    for name in (
        "rope_parameters",
        "layer_types",
        "sliding_window",
        "is_causal",
        "use_bidirectional_attention",
        "head_dim",
        "hidden_size",
        "vocab_size",
        "tie_word_embeddings",
    ):
        if hasattr(model.config, name) and getattr(loaded, name, None) != getattr(
            model.config, name
        ):
            raise RuntimeError(
                f"{path}: {name} reads back as {getattr(loaded, name, None)!r}, the weights were "
                f"made with {getattr(model.config, name)!r}"
            )


def _save_custom(
    directory: Path,
    *,
    code: Mapping[str, str],
    config: Mapping[str, Any],
    auto_class: str,
    seed: int,
    dtype: torch.dtype,
    prefix: str = "",
) -> None:
    """A trust_remote_code checkpoint: the code files, config.json as given, and model.safetensors
    from the shipped class itself (loaded with trust_remote_code, seeded), keys under `prefix`."""
    import transformers
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    for name, text in code.items():
        (directory / name).write_text(text, encoding="utf-8")
    _write_json(directory / "config.json", dict(sorted(config.items())))
    loaded = transformers.AutoConfig.from_pretrained(str(directory), trust_remote_code=True)
    _seed(seed)
    model = getattr(transformers, auto_class).from_config(loaded, trust_remote_code=True)
    state = {
        prefix + name: tensor.detach().to(dtype).contiguous()
        for name, tensor in model.state_dict().items()
    }
    save_file(state, str(directory / "model.safetensors"), metadata={"format": "pt"})


def _st_versions(sentence_transformers: str, transformers: str, pytorch: str) -> dict[str, Any]:
    return {
        "__version__": {
            "sentence_transformers": sentence_transformers,
            "transformers": transformers,
            "pytorch": pytorch,
        }
    }


def _write_st(
    directory: Path,
    modules: Sequence[tuple[str, str]],
    *,
    max_seq_length: int,
    do_lower_case: bool = False,
    st_config: Mapping[str, Any] | None = None,
) -> None:
    """modules.json (`(path, class)` pairs, classes under sentence_transformers.models),
    sentence_bert_config.json and config_sentence_transformers.json. Normalize modules get no
    folder: hub repositories cannot hold an empty one."""
    _write_json(
        directory / "modules.json",
        [
            {"idx": i, "name": str(i), "path": path, "type": ST_MODULES + kind}
            for i, (path, kind) in enumerate(modules)
        ],
    )
    _write_json(
        directory / "sentence_bert_config.json",
        {"max_seq_length": max_seq_length, "do_lower_case": do_lower_case},
    )
    if st_config is not None:
        _write_json(directory / "config_sentence_transformers.json", dict(st_config))


def _write_pooling(
    directory: Path, dimension: int, mode: str, *, legacy: bool = False, path: str = "1_Pooling"
) -> None:
    """1_Pooling/config.json. `legacy` is the five keys sentence-transformers 2.0 - 2.2 wrote;
    otherwise the eight keys of later versions (weightedmean, lasttoken, include_prompt)."""
    modes = ["cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens"]
    if not legacy:
        modes += ["weightedmean_tokens", "lasttoken"]
    wanted = {"cls": "cls_token", "mean": "mean_tokens", "lasttoken": "lasttoken"}[mode]
    config: dict[str, Any] = {"word_embedding_dimension": dimension}
    config.update({f"pooling_mode_{m}": m == wanted for m in modes})
    if not legacy:
        config["include_prompt"] = True
    _write_json(directory / path / "config.json", config)


def _write_dense(
    directory: Path,
    path: str,
    in_features: int,
    out_features: int,
    *,
    bias: bool,
    file_name: str = "model.safetensors",
) -> None:
    """A sentence_transformers Dense folder: config.json (Identity activation) and its
    `linear.weight` (and `linear.bias`) in model.safetensors or, for older repositories, a
    torch.save'd pytorch_model.bin. Weights drawn from torch's current (seeded) generator."""
    from safetensors.torch import save_file

    linear = torch.nn.Linear(in_features, out_features, bias=bias)
    folder = directory / path
    _write_json(
        folder / "config.json",
        {
            "in_features": in_features,
            "out_features": out_features,
            "bias": bias,
            "activation_function": IDENTITY,
        },
    )
    state = {f"linear.{name}": t.detach().contiguous() for name, t in linear.state_dict().items()}
    if file_name == "model.safetensors":
        save_file(state, str(folder / file_name), metadata={"format": "pt"})
    else:
        torch.save(state, folder / file_name)


def _bert_config(vocab_size: int = BERT_VOCAB, **extra: Any) -> Any:
    from transformers import BertConfig

    return BertConfig(
        vocab_size=vocab_size,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=2,
        intermediate_size=INTERMEDIATE,
        max_position_embeddings=512,
        initializer_range=INITIALIZER_RANGE,
        **extra,
    )


def _xlmr_config(vocab_size: int, max_position_embeddings: int = 514, **extra: Any) -> Any:
    from transformers import XLMRobertaConfig

    return XLMRobertaConfig(
        vocab_size=vocab_size,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=2,
        intermediate_size=INTERMEDIATE,
        max_position_embeddings=max_position_embeddings,
        type_vocab_size=1,
        layer_norm_eps=1e-5,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        initializer_range=INITIALIZER_RANGE,
        **extra,
    )


def _write_bert_model(directory: Path, seed: int, transformers_version: str, **extra: Any) -> None:
    """A BertModel (with its pooler, as BERT checkpoints saved by sentence-transformers carry it)
    and the bundled bert-base-uncased tokenizer."""
    from transformers import BertModel

    _write_bert_tokenizer(directory)
    _seed(seed)
    model = BertModel(_bert_config(**extra))
    _save_model(model, directory, dtype=torch.float32, transformers_version=transformers_version)


# --- generators: embedding models ---------------------------------------------------------------


def make_all_mpnet_base_v2(directory: Path) -> Path:
    """sentence-transformers/all-mpnet-base-v2: config.json says architectures
    ["MPNetForMaskedLM"] (as the real one) over weights of an MPNetModel without its pooler, so
    `AutoModel` (MPNetModel) loads them with only pooler.dense newly initialised (the real repo
    does the same; the pooler is not used). MPNet's WordPiece tokenizer (<s>=0 <pad>=1 </s>=2
    <unk>=3 ... <mask>=30526), Transformer + Pooling(mean, the five keys of sentence-transformers
    2.0) + Normalize, max_seq_length 384, config.json without torch_dtype (transformers 4.8)."""
    from transformers import MPNetConfig, MPNetModel

    _write_mpnet_tokenizer(directory)
    _seed(1)
    config = MPNetConfig(
        vocab_size=BERT_VOCAB + 5,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=2,
        intermediate_size=INTERMEDIATE,
        max_position_embeddings=514,
        layer_norm_eps=1e-5,
        initializer_range=INITIALIZER_RANGE,
    )
    _save_model(
        MPNetModel(config, add_pooling_layer=False),
        directory,
        dtype=torch.float32,
        transformers_version="4.8.2",
        keep_dtype_key=False,
        architectures=["MPNetForMaskedLM"],
    )
    _write_st(
        directory,
        [("", "Transformer"), ("1_Pooling", "Pooling"), ("2_Normalize", "Normalize")],
        max_seq_length=384,
        st_config=_st_versions("2.0.0", "4.6.1", "1.8.1"),
    )
    _write_pooling(directory, HIDDEN, "mean", legacy=True)
    return directory


def make_msmarco_distilbert_base_v4(directory: Path) -> Path:
    """sentence-transformers/msmarco-distilbert-base-v4: DistilBertModel (its config has `dim`,
    `n_layers`, `n_heads`, `hidden_dim`, no hidden_size key), DistilBertTokenizer (no token type
    ids: DistilBertModel.forward takes none), Transformer + Pooling(mean), no Normalize."""
    from transformers import DistilBertConfig, DistilBertModel

    _write_bert_tokenizer(directory, tokenizer_class="DistilBertTokenizer")
    _seed(2)
    config = DistilBertConfig(
        vocab_size=BERT_VOCAB,
        dim=HIDDEN,
        n_layers=LAYERS,
        n_heads=2,
        hidden_dim=INTERMEDIATE,
        max_position_embeddings=512,
        initializer_range=INITIALIZER_RANGE,
    )
    _save_model(
        DistilBertModel(config),
        directory,
        dtype=torch.float32,
        transformers_version="4.7.0",
        keep_dtype_key=False,
    )
    _write_st(
        directory,
        [("", "Transformer"), ("1_Pooling", "Pooling")],
        max_seq_length=512,
        st_config=_st_versions("2.0.0", "4.7.0", "1.9.0+cu102"),
    )
    _write_pooling(directory, HIDDEN, "mean", legacy=True)
    return directory


def _make_t5(
    directory: Path, *, seed: int, max_seq_length: int, versions: Mapping[str, Any]
) -> Path:
    from transformers import T5Config, T5EncoderModel

    size = _write_t5_tokenizer(directory)
    _seed(seed)
    config = T5Config(
        vocab_size=_rounded(size, 128),
        d_model=HIDDEN,
        d_kv=16,
        d_ff=INTERMEDIATE,
        num_layers=LAYERS,
        num_decoder_layers=LAYERS,
        num_heads=2,
        relative_attention_num_buckets=32,
        relative_attention_max_distance=128,
        feed_forward_proj="relu",
        decoder_start_token_id=0,
        pad_token_id=0,
        eos_token_id=1,
    )
    _save_model(
        T5EncoderModel(config), directory, dtype=torch.float16, transformers_version="4.16.2"
    )
    _write_st(
        directory,
        [
            ("", "Transformer"),
            ("1_Pooling", "Pooling"),
            ("2_Dense", "Dense"),
            ("3_Normalize", "Normalize"),
        ],
        max_seq_length=max_seq_length,
        st_config=versions,
    )
    _write_pooling(directory, HIDDEN, "mean", legacy=True)
    _write_dense(directory, "2_Dense", HIDDEN, HIDDEN, bias=False)
    return directory


def make_gtr_t5_base(directory: Path) -> Path:
    """sentence-transformers/gtr-t5-base: a T5EncoderModel checkpoint (architectures
    ["T5EncoderModel"]; keys shared.* and encoder.*, no decoder) stored in float16 as the real one,
    T5's Unigram tokenizer (appends </s>, no BOS), Transformer + Pooling(mean) + Dense (in
    2_Dense: d_model -> d_model, no bias, Identity, `linear.weight` in model.safetensors) +
    Normalize at 3_Normalize, max_seq_length 512. sentence-transformers loads T5 configs with
    T5EncoderModel (its `_ENCODER_ONLY_MODELS`), not AutoModel (which would build the decoder)."""
    return _make_t5(
        directory,
        seed=3,
        max_seq_length=512,
        versions=_st_versions("2.2.0", "4.16.2", "1.10.1+cu113"),
    )


def make_sentence_t5_base(directory: Path) -> Path:
    """sentence-transformers/sentence-t5-base: the same layout as gtr-t5-base (T5EncoderModel in
    float16, Pooling(mean), 2_Dense without bias, 3_Normalize); what differs is
    max_seq_length 256 (gtr-t5-base: 512)."""
    return _make_t5(
        directory,
        seed=4,
        max_seq_length=256,
        versions=_st_versions("2.2.0", "4.16.2", "1.10.0+cu113"),
    )


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
    _write_bert_tokenizer(directory, model_max_length=8192)
    config = {
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
        "vocab_size": _rounded(BERT_VOCAB, 64),
    }
    _save_custom(
        directory,
        code={
            "configuration_hf_nomic_bert.py": _NOMIC_CONFIGURATION,
            "modeling_hf_nomic_bert.py": _NOMIC_MODELING,
        },
        config=config,
        auto_class="AutoModel",
        seed=5,
        dtype=torch.float32,
    )
    _write_st(
        directory,
        [("", "Transformer"), ("1_Pooling", "Pooling"), ("2_Normalize", "Normalize")],
        max_seq_length=8192,
        st_config={
            **_st_versions("2.4.0.dev0", "4.37.2", "2.1.0+cu121"),
            "prompts": NOMIC_PROMPTS,
            "default_prompt_name": None,
        },
    )
    _write_pooling(directory, HIDDEN, "mean")
    return directory


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
    _write_bert_tokenizer(directory, model_max_length=8192)
    config = {
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
        "vocab_size": _rounded(BERT_VOCAB, 64),
    }
    _save_custom(
        directory,
        code={"configuration.py": _GTE_CONFIGURATION, "modeling.py": _GTE_MODELING},
        config=config,
        auto_class="AutoModel",
        seed=6,
        dtype=torch.float32,
    )
    _write_st(
        directory,
        [("", "Transformer"), ("1_Pooling", "Pooling")],
        max_seq_length=8192,
        st_config=_st_versions("2.7.0", "4.39.1", "2.1.2+cu121"),
    )
    _write_pooling(directory, HIDDEN, "cls")
    return directory


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
    _write_bert_tokenizer(directory, model_max_length=8192)
    config = {
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
        "vocab_size": _rounded(BERT_VOCAB, 64),
    }
    _save_custom(
        directory,
        code={"configuration_bert.py": _JINA_CONFIGURATION, "modeling_bert.py": _JINA_MODELING},
        config=config,
        auto_class="AutoModel",
        seed=7,
        dtype=torch.float32,
        prefix="bert.",
    )
    _write_st(
        directory,
        [("", "Transformer"), ("1_Pooling", "Pooling")],
        max_seq_length=8192,
        st_config=_st_versions("2.2.2", "4.26.0", "1.13.1+cu117"),
    )
    _write_pooling(directory, HIDDEN, "mean", legacy=True)
    return directory


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

    ids = _write_qwen_tokenizer(directory, append_endoftext=True, padding_side="left")
    config_path = directory / "tokenizer_config.json"
    _write_json(config_path, {**_read_json(config_path), "chat_template": CHATML_TEMPLATE})
    _seed(8)
    _save_model(
        Qwen3ForCausalLM(_qwen3_config(ids)),
        directory,
        dtype=torch.bfloat16,
        transformers_version="4.51.3",
        drop=("layer_types",),
    )
    _write_st(
        directory,
        [("", "Transformer"), ("1_Pooling", "Pooling"), ("2_Normalize", "Normalize")],
        max_seq_length=32768,
        st_config={
            **_st_versions("3.4.1", "4.51.3", "2.6.0+cu124"),
            "prompts": QWEN3_EMBEDDING_PROMPTS,
            "default_prompt_name": None,
            "similarity_fn_name": "cosine",
        },
    )
    _write_pooling(directory, HIDDEN, "lasttoken")
    return directory


def make_e5_mistral_7b_instruct(directory: Path) -> Path:
    """intfloat/e5-mistral-7b-instruct: a MistralModel checkpoint (architectures
    ["MistralModel"], keys without prefix) in float16, sliding_window 4096; Llama/Mistral
    SentencePiece BPE with byte fallback whose tokenizer appends </s> (add_eos_token, as the
    sentence-transformers version of the repo does) and pads with </s>. tokenizer_config.json
    names LlamaTokenizer, but transformers 5 maps model_type "mistral" to TokenizersBackend and
    uses it whatever the file says: tokenizer.json is taken verbatim and padding is on the right,
    not LlamaTokenizer's left. Transformer + Pooling(lasttoken) + Normalize,
    max_seq_length 4096, its instruction prompts (web_search_query, sts_query, ...)."""
    from transformers import MistralConfig, MistralModel

    size = _write_llama_tokenizer(directory, add_eos_token=True)
    _seed(9)
    config = MistralConfig(
        vocab_size=size,
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32768,
        rope_theta=10000.0,
        sliding_window=4096,
        rms_norm_eps=1e-5,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
        tie_word_embeddings=False,
        initializer_range=INITIALIZER_RANGE,
    )
    _save_model(
        MistralModel(config),
        directory,
        dtype=torch.float16,
        transformers_version="4.34.0",
        drop=("layer_types",),
    )
    _write_st(
        directory,
        [("", "Transformer"), ("1_Pooling", "Pooling"), ("2_Normalize", "Normalize")],
        max_seq_length=4096,
        st_config={
            **_st_versions("2.7.0.dev0", "4.39.3", "2.2.2+cu121"),
            "prompts": E5_MISTRAL_PROMPTS,
            "default_prompt_name": None,
        },
    )
    _write_pooling(directory, HIDDEN, "lasttoken")
    return directory


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

    ids = _write_qwen_tokenizer(
        directory, append_endoftext=True, eos_token="<|endoftext|>", model_max_length=32768
    )
    _seed(10)
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
    _save_model(
        Qwen2ForCausalLM(config),
        directory,
        dtype=torch.float32,
        transformers_version="4.41.2",
        drop=("layer_types",),
    )
    _write_st(
        directory,
        [("", "Transformer"), ("1_Pooling", "Pooling"), ("2_Normalize", "Normalize")],
        max_seq_length=32768,
        st_config={
            **_st_versions("2.7.0", "4.41.2", "2.3.0+cu121"),
            "prompts": GTE_QWEN2_PROMPTS,
            "default_prompt_name": None,
        },
    )
    _write_pooling(directory, HIDDEN, "lasttoken")
    return directory


def make_mxbai_embed_large_v1(directory: Path, *, truncate_dim: int | None = None) -> Path:
    """mixedbread-ai/mxbai-embed-large-v1: BertModel, Transformer + Pooling(cls), no Normalize
    module, prompts query ("Represent this sentence for searching relevant passages: ") and
    passage (""), max_seq_length 512. A Matryoshka model: its first dimensions are an embedding
    too. With `truncate_dim` config_sentence_transformers.json carries "truncate_dim" (see
    `make_mxbai_embed_large_v1_truncated`)."""
    _write_bert_model(directory, 11, "4.37.0")
    st_config: dict[str, Any] = {
        **_st_versions("2.3.1", "4.37.0", "2.1.2+cu121"),
        "prompts": {"query": RETRIEVAL_QUERY_PROMPT, "passage": ""},
        "default_prompt_name": None,
    }
    if truncate_dim is not None:
        st_config.update(similarity_fn_name="cosine", truncate_dim=truncate_dim)
    _write_st(
        directory,
        [("", "Transformer"), ("1_Pooling", "Pooling")],
        max_seq_length=512,
        st_config=st_config,
    )
    _write_pooling(directory, HIDDEN, "cls")
    return directory


def make_mxbai_embed_large_v1_truncated(directory: Path) -> Path:
    """mxbai-embed-large-v1 (same weights) saved with truncate_dim 16 in
    config_sentence_transformers.json, as `SentenceTransformer(..., truncate_dim=16).save()`
    writes it: poolserve should serve 16 dimensions by default. sentence-transformers 6.2 applies
    it in `encode` after the whole module pipeline (after Normalize, where a model has one) and
    does not normalise again unless normalize_embeddings=True: the truncated vectors of a model
    with a Normalize module are not unit length. This model has none, so they are the first 16
    values of the CLS vector."""
    return make_mxbai_embed_large_v1(directory, truncate_dim=MATRYOSHKA_TRUNCATE_DIM)


def make_bge_small_en_v1_5(directory: Path) -> Path:
    """BAAI/bge-small-en-v1.5: BertModel, Transformer + Pooling(cls) + Normalize,
    sentence_bert_config max_seq_length 512 with do_lower_case true, no prompts (the query
    instruction lives in the model card only)."""
    _write_bert_model(directory, 12, "4.30.0")
    _write_st(
        directory,
        [("", "Transformer"), ("1_Pooling", "Pooling"), ("2_Normalize", "Normalize")],
        max_seq_length=512,
        do_lower_case=True,
        st_config=_st_versions("2.2.2", "4.28.1", "1.13.0+cu117"),
    )
    _write_pooling(directory, HIDDEN, "cls", legacy=True)
    return directory


def make_multilingual_e5_small(directory: Path) -> Path:
    """intfloat/multilingual-e5-small: a BertModel (architectures ["BertModel"]) behind an
    XLM-RoBERTa SentencePiece tokenizer (tokenizer_class XLMRobertaTokenizer, as the real one:
    <s>=0 <pad>=1 </s>=2 <unk>=3, no token type ids), Transformer + Pooling(mean) + Normalize,
    prompts query ("query: ") and passage ("passage: "), max_seq_length 512."""
    from transformers import BertModel

    size = _write_xlmr_tokenizer(directory)
    _seed(13)
    _save_model(
        BertModel(_bert_config(vocab_size=size, pad_token_id=1)),
        directory,
        dtype=torch.float32,
        transformers_version="4.29.0.dev0",
    )
    _write_st(
        directory,
        [("", "Transformer"), ("1_Pooling", "Pooling"), ("2_Normalize", "Normalize")],
        max_seq_length=512,
        st_config={
            **_st_versions("2.2.2", "4.29.0.dev0", "1.13.1+cu117"),
            "prompts": E5_PROMPTS,
            "default_prompt_name": None,
        },
    )
    _write_pooling(directory, HIDDEN, "mean", legacy=True)
    return directory


def _make_xlmr_embedding(
    directory: Path, *, seed: int, prompts: Mapping[str, str], version: str
) -> Path:
    from transformers import XLMRobertaModel

    size = _write_xlmr_tokenizer(directory)
    _seed(seed)
    _save_model(
        XLMRobertaModel(_xlmr_config(size)),
        directory,
        dtype=torch.float32,
        transformers_version=version,
    )
    _write_st(
        directory,
        [("", "Transformer"), ("1_Pooling", "Pooling"), ("2_Normalize", "Normalize")],
        max_seq_length=512,
        st_config={
            **_st_versions("2.2.2", version, "1.13.1+cu117"),
            "prompts": dict(prompts),
            "default_prompt_name": None,
        },
    )
    _write_pooling(directory, HIDDEN, "mean", legacy=True)
    return directory


def make_multilingual_e5_base(directory: Path) -> Path:
    """intfloat/multilingual-e5-base: XLMRobertaModel (positions counted from padding_idx + 1,
    max_position_embeddings 514, type_vocab_size 1), XLM-RoBERTa Unigram tokenizer,
    Transformer + Pooling(mean) + Normalize, prompts query / passage, max_seq_length 512."""
    return _make_xlmr_embedding(directory, seed=14, prompts=E5_PROMPTS, version="4.29.0.dev0")


def make_multilingual_e5_large_instruct(directory: Path) -> Path:
    """intfloat/multilingual-e5-large-instruct: XLMRobertaModel, Transformer + Pooling(mean) +
    Normalize, the instruct-style query prompt "Instruct: {task}\\nQuery: " of its model card as
    prompt web_search_query (documents take none), max_seq_length 512."""
    return _make_xlmr_embedding(
        directory,
        seed=15,
        prompts={"web_search_query": E5_MISTRAL_PROMPTS["web_search_query"]},
        version="4.38.1",
    )


def make_snowflake_arctic_embed_m(directory: Path) -> Path:
    """Snowflake/snowflake-arctic-embed-m: BertModel, Transformer + Pooling(cls) + Normalize,
    prompt query ("Represent this sentence for searching relevant passages: "), max_seq_length
    512."""
    _write_bert_model(directory, 16, "4.39.3")
    _write_st(
        directory,
        [("", "Transformer"), ("1_Pooling", "Pooling"), ("2_Normalize", "Normalize")],
        max_seq_length=512,
        st_config={
            **_st_versions("2.7.0", "4.39.3", "2.1.0+cu121"),
            "prompts": {"query": RETRIEVAL_QUERY_PROMPT},
            "default_prompt_name": None,
        },
    )
    _write_pooling(directory, HIDDEN, "cls", legacy=True)
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

    ids = _write_qwen_tokenizer(
        directory, append_endoftext=False, eos_token="<|endoftext|>", model_max_length=32768
    )
    _seed(17)
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
    _save_model(
        Qwen2Model(config),
        directory,
        dtype=torch.float32,
        transformers_version="4.42.3",
        drop=("layer_types",),
    )
    dense = f"2_Dense_{STELLA_DENSE_DIM}"
    _write_st(
        directory,
        [("", "Transformer"), ("1_Pooling", "Pooling"), (dense, "Dense")],
        max_seq_length=512,
        st_config={
            **_st_versions("3.0.1", "4.42.3", "2.3.1+cu121"),
            "prompts": STELLA_PROMPTS,
            "default_prompt_name": None,
            "similarity_fn_name": "cosine",
        },
    )
    _write_pooling(directory, HIDDEN, "mean")
    _write_dense(
        directory, dense, HIDDEN, STELLA_DENSE_DIM, bias=True, file_name="pytorch_model.bin"
    )
    _write_dense(directory, "2_Dense_8", HIDDEN, 8, bias=True, file_name="pytorch_model.bin")
    return directory


def _make_modernbert(
    directory: Path,
    *,
    seed: int,
    mode: str,
    normalize: bool,
    prompts: Mapping[str, str] | None,
) -> Path:
    from transformers import ModernBertConfig, ModernBertModel

    ids = _write_modernbert_tokenizer(directory)
    _seed(seed)
    config = ModernBertConfig(
        vocab_size=_rounded(ids["size"], 64),
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS,
        num_attention_heads=2,
        max_position_embeddings=8192,
        global_attn_every_n_layers=3,
        local_attention=16,
        global_rope_theta=160000.0,
        local_rope_theta=10000.0,
        pad_token_id=ids["[PAD]"],
        cls_token_id=ids["[CLS]"],
        sep_token_id=ids["[SEP]"],
        bos_token_id=ids["[CLS]"],
        eos_token_id=ids["[SEP]"],
        initializer_range=INITIALIZER_RANGE,
    )
    _save_model(
        ModernBertModel(config),
        directory,
        dtype=torch.float32,
        transformers_version="4.48.0",
        layer_type_rope={
            "full_attention": "global_rope_theta",
            "sliding_attention": "local_rope_theta",
        },
        drop=("layer_types",),
        global_attn_every_n_layers=3,
    )
    modules = [("", "Transformer"), ("1_Pooling", "Pooling")]
    if normalize:
        modules.append(("2_Normalize", "Normalize"))
    st_config: dict[str, Any] = _st_versions("3.3.1", "4.48.0", "2.5.1+cu124")
    if prompts is not None:
        st_config.update(prompts=dict(prompts), default_prompt_name=None)
    st_config["similarity_fn_name"] = "cosine"
    _write_st(directory, modules, max_seq_length=8192, st_config=st_config)
    _write_pooling(directory, HIDDEN, mode)
    return directory


def make_gte_modernbert_base(directory: Path) -> Path:
    """Alibaba-NLP/gte-modernbert-base: ModernBertModel (global attention every 3rd layer, so
    layer 0 global and layer 1 local; local_attention 16 here, 128 in the real one, so that
    ordinary sentences reach past the window), ModernBERT's byte-level BPE ([CLS] A [SEP]),
    Transformer + Pooling(cls), no Normalize module, max_seq_length 8192."""
    return _make_modernbert(directory, seed=18, mode="cls", normalize=False, prompts=None)


def make_modernbert_embed_base(directory: Path) -> Path:
    """nomic-ai/modernbert-embed-base: ModernBertModel as in `make_gte_modernbert_base`,
    Transformer + Pooling(mean) + Normalize, prompts query ("search_query: ") and document
    ("search_document: "), max_seq_length 8192."""
    return _make_modernbert(
        directory, seed=19, mode="mean", normalize=True, prompts=MODERNBERT_EMBED_PROMPTS
    )


EMBEDDINGGEMMA_DENSE_DIM = 4 * HIDDEN


def make_embeddinggemma_300m(directory: Path) -> Path:
    """google/embeddinggemma-300m: Gemma3TextModel (model_type gemma3_text), bidirectional
    attention (`use_bidirectional_attention` true, which transformers 5.24's Gemma3TextConfig
    honours and for which it halves sliding_window into a symmetric window), one sliding and one
    full layer (sliding_window 16 here, 512 in the real one), Gemma's SentencePiece BPE with
    <bos> prepended and <eos> appended. Transformer + Pooling(mean) + Dense hidden -> 4 x hidden
    (2_Dense, no bias, Identity) + Dense back (3_Dense) + 4_Normalize, max_seq_length 2048, its
    prompts (query "task: search result | query: ", document "title: none | text: ", and the
    MTEB task names)."""
    from transformers import Gemma3TextConfig, Gemma3TextModel

    size = _write_gemma_tokenizer(
        directory, add_eos_token=True, padding_side="right", model_max_length=2048
    )
    _seed(20)
    config = Gemma3TextConfig(
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
    _save_model(
        Gemma3TextModel(config),
        directory,
        dtype=torch.float32,
        transformers_version="4.57.0.dev0",
        layer_type_rope={
            "full_attention": "rope_theta",
            "sliding_attention": "rope_local_base_freq",
        },
        rope_scaling=None,
    )
    _write_st(
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
            **_st_versions("5.1.0", "4.57.0.dev0", "2.8.0+cu128"),
            "prompts": EMBEDDINGGEMMA_PROMPTS,
            "default_prompt_name": None,
            "similarity_fn_name": "cosine",
        },
    )
    _write_pooling(directory, HIDDEN, "mean")
    _write_dense(directory, "2_Dense", HIDDEN, EMBEDDINGGEMMA_DENSE_DIM, bias=False)
    _write_dense(directory, "3_Dense", EMBEDDINGGEMMA_DENSE_DIM, HIDDEN, bias=False)
    return directory


def make_bge_m3(directory: Path) -> Path:
    """BAAI/bge-m3: XLMRobertaModel (max_position_embeddings 8194), XLM-RoBERTa Unigram tokenizer
    (model_max_length 8192), Transformer + Pooling(cls) + Normalize, max_seq_length 8192, and in
    the model root, as the real repository ships them, colbert_linear.pt (torch.save of a
    Linear(hidden, hidden) state dict: weight, bias) and sparse_linear.pt (Linear(hidden, 1))."""
    from transformers import XLMRobertaModel

    size = _write_xlmr_tokenizer(directory, model_max_length=BGE_M3_MAX_LENGTH)
    _seed(21)
    _save_model(
        XLMRobertaModel(_xlmr_config(size, max_position_embeddings=BGE_M3_MAX_LENGTH + 2)),
        directory,
        dtype=torch.float32,
        transformers_version="4.33.0",
    )
    colbert = torch.nn.Linear(HIDDEN, HIDDEN)
    sparse = torch.nn.Linear(HIDDEN, 1)
    torch.save(colbert.state_dict(), directory / "colbert_linear.pt")
    torch.save(sparse.state_dict(), directory / "sparse_linear.pt")
    _write_st(
        directory,
        [("", "Transformer"), ("1_Pooling", "Pooling"), ("2_Normalize", "Normalize")],
        max_seq_length=BGE_M3_MAX_LENGTH,
        st_config=_st_versions("2.2.2", "4.33.0", "2.1.2+cu121"),
    )
    _write_pooling(directory, HIDDEN, "cls", legacy=True)
    return directory


# --- generators: rerankers ----------------------------------------------------------------------


def make_ms_marco_minilm_l6_v2(directory: Path) -> Path:
    """cross-encoder/ms-marco-MiniLM-L6-v2: `tests.tiny_models.make_cross_encoder` in its "st4"
    layout (BertForSequenceClassification, 1 label, the activation in config.json)."""
    return make_cross_encoder(directory, layout="st4")


def make_bge_reranker_v2_m3(directory: Path) -> Path:
    """BAAI/bge-reranker-v2-m3: XLMRobertaForSequenceClassification with one label (LABEL_0),
    max_position_embeddings 8194, in the plain transformers layout (config.json,
    model.safetensors, tokenizer; no sentence-transformers files), float32."""
    from transformers import XLMRobertaForSequenceClassification

    size = _write_xlmr_tokenizer(directory, model_max_length=8192)
    _seed(22)
    config = _xlmr_config(size, max_position_embeddings=8194, num_labels=1)
    _save_model(
        XLMRobertaForSequenceClassification(config),
        directory,
        dtype=torch.float32,
        transformers_version="4.38.1",
    )
    return directory


def _qwen3_reranker(directory: Path, *, padding_side: str | None) -> tuple[Any, dict[str, int]]:
    """The Qwen3-Reranker tokenizer in `directory` (nothing appended) and the seeded
    Qwen3ForCausalLM both Qwen3-Reranker generators start from, rounded to bfloat16."""
    from transformers import Qwen3ForCausalLM

    ids = _write_qwen_tokenizer(directory, append_endoftext=False, padding_side=padding_side)
    _seed(24)
    return Qwen3ForCausalLM(_qwen3_config(ids)).to(torch.bfloat16), ids


def make_qwen3_reranker_0_6b(directory: Path) -> Path:
    """Qwen/Qwen3-Reranker-0.6B: Qwen3ForCausalLM (tied embeddings, bfloat16), Qwen's BPE whose
    tokenizer appends nothing, no sentence-transformers files: scored by the model card's formula
    (`qwen3_reranker_reference_scores`), softmax over the last position's "no" / "yes" logits.
    Serve with task cross_encoder."""
    model, _ = _qwen3_reranker(directory, padding_side=None)
    _save_model(
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
    vocab = _qwen_bpe()[0]
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
    _save_model(
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


def make_bge_reranker_v2_gemma(directory: Path) -> Path:
    """BAAI/bge-reranker-v2-gemma: GemmaForCausalLM (tied embeddings, MQA with one KV head,
    head_dim 16 != hidden/heads), Gemma's SentencePiece BPE (<bos> prepended, nothing appended,
    model_max_length 1e30 as gemma-2b's), no sentence-transformers files: scored by
    FlagEmbedding's FlagLLMReranker formula (`bge_reranker_gemma_reference_scores`), the last
    position's "Yes" logit. Serve with task cross_encoder."""
    from transformers import GemmaConfig, GemmaForCausalLM

    size = _write_gemma_tokenizer(directory, add_eos_token=False)
    _seed(25)
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
    _save_model(
        GemmaForCausalLM(config),
        directory,
        dtype=torch.float32,
        transformers_version="4.40.0",
    )
    return directory


def make_jina_reranker_v2_base_multilingual(directory: Path) -> Path:
    """jinaai/jina-reranker-v2-base-multilingual-style: code shipped with the model
    (configuration_xlm_roberta.py with XLMRobertaFlashConfig, model_type "xlm-roberta";
    modeling_xlm_roberta.py with XLMRobertaModel and XLMRobertaForSequenceClassification whose
    forward returns `logits`; auto_map for AutoConfig, AutoModel and
    AutoModelForSequenceClassification; the real one points at
    jinaai/xlm-roberta-flash-implementation), architectures
    ["XLMRobertaForSequenceClassification"], one label, bfloat16 weights under roberta.* and
    classifier.*, XLM-RoBERTa tokenizer (model_max_length 1024), no sentence-transformers files."""
    size = _write_xlmr_tokenizer(directory, model_max_length=1024)
    config = {
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
    _save_custom(
        directory,
        code={
            "configuration_xlm_roberta.py": _JINA_RERANKER_CONFIGURATION,
            "modeling_xlm_roberta.py": _JINA_RERANKER_MODELING,
        },
        config=config,
        auto_class="AutoModelForSequenceClassification",
        seed=26,
        dtype=torch.bfloat16,
    )
    return directory


# --- references ---------------------------------------------------------------------------------

FP32 = torch.float32


def _tokenizer(directory: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(directory))


def _load_f64(auto_class: Any, directory: Path, **kwargs: Any) -> Any:
    """A transformers model in float64 (loaded in float32 first: `dtype="auto"` would take the
    checkpoint's bfloat16 / float16)."""
    return auto_class.from_pretrained(str(directory), dtype=FP32, **kwargs).double().eval()


def sentence_transformer(directory: Path, *, trust_remote_code: bool = False) -> Any:
    """`SentenceTransformer(directory)` on the CPU in float32, as the references use it."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(
        str(directory),
        device="cpu",
        trust_remote_code=trust_remote_code,
        model_kwargs={"dtype": FP32},
    )


def cross_encoder(directory: Path, *, trust_remote_code: bool = False) -> Any:
    """`CrossEncoder(directory)` on the CPU in float32, as the references use it."""
    from sentence_transformers import CrossEncoder

    return CrossEncoder(
        str(directory),
        device="cpu",
        trust_remote_code=trust_remote_code,
        model_kwargs={"dtype": FP32},
    )


def reference_embeddings(
    model: ZooModel,
    directory: Path,
    texts: Sequence[str],
    *,
    prompt_name: str | None = None,
) -> np.ndarray:
    """`SentenceTransformer(directory).encode(texts, prompt_name=...)` in float32, [n, dim]:
    the model's own modules (pooling, Dense, Normalize) and its truncate_dim, nothing more."""
    if model.kind != "embedding":
        raise ValueError(f"{model.name} is a {model.kind} model, not an embedding model")
    encoder = sentence_transformer(directory, trust_remote_code=_trusts(model))
    vectors = encoder.encode(
        list(texts), prompt_name=prompt_name, convert_to_numpy=True, batch_size=16
    )
    return np.asarray(vectors, dtype=np.float32).reshape(len(texts), -1)


def reference_scores(
    model: ZooModel, directory: Path, query: str, documents: Sequence[str]
) -> np.ndarray:
    """What a correct server returns for `query` against each document, shape [n]:

    - cross-encoders (sequence classification): `CrossEncoder(directory).predict`, float32, with
      the model's activation (sigmoid for one label);
    - Qwen3-Reranker-0.6B-seq-cls: the same on the pairs its card builds
      (`qwen3_reranker_seq_cls_pairs`);
    - Qwen3-Reranker-0.6B: the card's formula, float64 (`qwen3_reranker_reference_scores`);
    - bge-reranker-v2-gemma: FlagLLMReranker's raw "Yes" logit, float64 (no sigmoid);
    - embedding models: the cosine similarity of the query's and each document's reference
      embedding (no prompt), float32.
    """
    if model.kind == "embedding":
        vectors = reference_embeddings(model, directory, [query, *documents]).astype(np.float64)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        return np.asarray(vectors[1:] @ vectors[0], dtype=np.float32)
    if model.name == "Qwen3-Reranker-0.6B":
        return qwen3_reranker_reference_scores(directory, query, documents)
    if model.name == "bge-reranker-v2-gemma":
        return bge_reranker_gemma_reference_scores(directory, query, documents)
    if model.name == "Qwen3-Reranker-0.6B-seq-cls":
        pairs = qwen3_reranker_seq_cls_pairs(query, documents)
    else:
        pairs = [(query, document) for document in documents]
    scores = cross_encoder(directory, trust_remote_code=_trusts(model)).predict(
        pairs, batch_size=16, convert_to_numpy=True
    )
    return np.asarray(scores, dtype=np.float32).reshape(len(documents))


def qwen3_reranker_seq_cls_pairs(
    query: str, documents: Sequence[str], *, instruction: str = QWEN3_RERANKER_INSTRUCTION
) -> list[tuple[str, str]]:
    """The (query, document) texts tomaarsen/Qwen3-Reranker-0.6B-seq-cls's card passes to
    `CrossEncoder.predict`: the chat prefix, instruction and query as the first text, the
    document and the chat suffix as the second (Qwen's tokenizer joins a pair with nothing)."""
    first = f"{QWEN3_RERANKER_PREFIX}<Instruct>: {instruction}\n<Query>: {query}\n"
    return [(first, f"<Document>: {document}{QWEN3_RERANKER_SUFFIX}") for document in documents]


def qwen3_reranker_reference_scores(
    directory: Path,
    query: str,
    documents: Sequence[str],
    *,
    instruction: str = QWEN3_RERANKER_INSTRUCTION,
) -> np.ndarray:
    """Qwen3-Reranker's model card, float64, one pair at a time: ids = prefix tokens (no special
    tokens) + tokenizer("<Instruct>: {instruction}\\n<Query>: {query}\\n<Document>: {doc}")
    (truncated to 8192 minus prefix and suffix) + suffix tokens; score = softmax([logit "no",
    logit "yes"])[1] at the last position."""
    from transformers import AutoModelForCausalLM

    tokenizer = _tokenizer(directory)
    model = _load_f64(AutoModelForCausalLM, directory)
    prefix = tokenizer.encode(QWEN3_RERANKER_PREFIX, add_special_tokens=False)
    suffix = tokenizer.encode(QWEN3_RERANKER_SUFFIX, add_special_tokens=False)
    yes = tokenizer.convert_tokens_to_ids("yes")
    no = tokenizer.convert_tokens_to_ids("no")
    budget = QWEN3_RERANKER_MAX_LENGTH - len(prefix) - len(suffix)
    scores = []
    with torch.no_grad():
        for document in documents:
            text = f"<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {document}"
            body = tokenizer(text, truncation="longest_first", max_length=budget)["input_ids"]
            ids = prefix + list(body) + suffix
            logits = model(input_ids=torch.tensor([ids])).logits[0, -1]
            pair = torch.stack([logits[no], logits[yes]])
            scores.append(float(torch.softmax(pair, dim=0)[1]))
    return np.asarray(scores, dtype=np.float64)


def bge_reranker_gemma_reference_scores(
    directory: Path,
    query: str,
    documents: Sequence[str],
    *,
    max_length: int = BGE_GEMMA_MAX_LENGTH,
) -> np.ndarray:
    """FlagEmbedding's FlagLLMReranker.compute_score, float64, one pair at a time: ids = [<bos>]
    + tokens of "A: {query}" (at most 3/4 of max_length) + tokens of "\\n" + tokens of
    "B: {passage}" (the pair cut to max_length from the passage's end) + "\\n" + the prompt's
    tokens, no special tokens anywhere else; the score is the raw logit of "Yes" (the first token
    of tokenizer("Yes")) at the last position. FlagEmbedding's normalize=True would apply a
    sigmoid; this returns the logit."""
    from transformers import AutoModelForCausalLM

    tokenizer = _tokenizer(directory)
    model = _load_f64(AutoModelForCausalLM, directory)

    def encode(text: str, limit: int | None = None) -> list[int]:
        options: dict[str, Any] = {"truncation": True, "max_length": limit} if limit else {}
        return list(tokenizer(text, add_special_tokens=False, **options)["input_ids"])

    prompt = encode(BGE_GEMMA_PROMPT)
    separator = encode(BGE_GEMMA_SEPARATOR)
    yes = encode("Yes")[0]
    scores = []
    with torch.no_grad():
        for document in documents:
            first = [tokenizer.bos_token_id, *encode(f"A: {query}", max_length * 3 // 4)]
            second = separator + encode(f"B: {document}", max_length)
            overflow = len(first) + len(second) - max_length
            if overflow > 0:
                second = second[: len(second) - overflow]
            ids = first + second + separator + prompt
            logits = model(input_ids=torch.tensor([ids])).logits[0, -1]
            scores.append(float(logits[yes]))
    return np.asarray(scores, dtype=np.float64)


@dataclass(frozen=True)
class M3Output:
    """BGE-M3's three outputs for one text (FlagEmbedding's BGEM3FlagModel.encode), float64."""

    dense: np.ndarray  # [hidden]: the CLS hidden state, L2-normalised
    lexical_weights: dict[int, float]  # token id -> max relu(sparse_linear) over its occurrences
    colbert_vecs: np.ndarray  # [tokens - 1, hidden]: colbert_linear of every token after CLS


def bge_m3_reference(directory: Path, texts: Sequence[str]) -> list[M3Output]:
    """FlagEmbedding's BGEM3FlagModel formulas, float64, one text at a time (truncated to 8192):
    dense = normalize(h[CLS]); token weights = relu(sparse_linear(h)), kept per token id as the
    maximum over its occurrences when > 0, skipping the cls, eos, pad and unk ids (FlagEmbedding
    keys them by str(id); here by int); colbert = normalize(colbert_linear(h[1:])) per row (the
    final </s> included)."""
    from transformers import AutoModel

    tokenizer = _tokenizer(directory)
    model = _load_f64(AutoModel, directory)
    colbert = {k: v.double() for k, v in torch.load(directory / "colbert_linear.pt").items()}
    sparse = {k: v.double() for k, v in torch.load(directory / "sparse_linear.pt").items()}
    unused = {
        tokenizer.cls_token_id,
        tokenizer.eos_token_id,
        tokenizer.pad_token_id,
        tokenizer.unk_token_id,
    }
    outputs = []
    with torch.no_grad():
        for text in texts:
            encoded = tokenizer(
                text, truncation=True, max_length=BGE_M3_MAX_LENGTH, return_tensors="pt"
            )
            hidden = model(**encoded).last_hidden_state[0]
            dense = hidden[0] / hidden[0].norm()
            weights = torch.relu(hidden @ sparse["weight"].T + sparse["bias"])[:, 0]
            lexical: dict[int, float] = {}
            for token, weight in zip(
                encoded["input_ids"][0].tolist(), weights.tolist(), strict=True
            ):
                if token not in unused and weight > 0 and weight > lexical.get(token, 0.0):
                    lexical[int(token)] = float(weight)
            vectors = hidden[1:] @ colbert["weight"].T + colbert["bias"]
            vectors = vectors / vectors.norm(dim=-1, keepdim=True)
            outputs.append(M3Output(dense.numpy(), lexical, vectors.numpy()))
    return outputs


def bge_m3_reference_dense(directory: Path, texts: Sequence[str]) -> np.ndarray:
    """[n, hidden] float64: BGE-M3's dense vectors."""
    return np.stack([output.dense for output in bge_m3_reference(directory, texts)])


def bge_m3_reference_lexical_weights(
    directory: Path, texts: Sequence[str]
) -> list[dict[int, float]]:
    """BGE-M3's lexical weights of each text, {token id: weight}."""
    return [output.lexical_weights for output in bge_m3_reference(directory, texts)]


def bge_m3_reference_colbert_vecs(directory: Path, texts: Sequence[str]) -> list[np.ndarray]:
    """BGE-M3's multi-vector output of each text, [tokens - 1, hidden] float64."""
    return [output.colbert_vecs for output in bge_m3_reference(directory, texts)]


def bge_m3_lexical_score(query: Mapping[int, float], passage: Mapping[int, float]) -> float:
    """FlagEmbedding's compute_lexical_matching_score: sum over shared ids of q_w * p_w."""
    return float(
        sum(weight * passage[token] for token, weight in query.items() if token in passage)
    )


def bge_m3_colbert_score(query: np.ndarray, passage: np.ndarray) -> float:
    """FlagEmbedding's colbert_score: the mean over query vectors of the best dot product."""
    return float((query @ passage.T).max(axis=1).sum() / query.shape[0])


@dataclass(frozen=True)
class M3Scores:
    """BGE-M3's scores of one query against each passage (float64, shape [n] each)."""

    dense: np.ndarray
    sparse: np.ndarray
    colbert: np.ndarray
    sparse_dense: np.ndarray  # FlagEmbedding's "sparse+dense"
    m3: np.ndarray  # FlagEmbedding's "colbert+sparse+dense"


def bge_m3_reference_scores(
    directory: Path,
    query: str,
    passages: Sequence[str],
    *,
    weights: tuple[float, float, float] = BGE_M3_WEIGHTS,
) -> M3Scores:
    """BGEM3FlagModel.compute_score with weights_for_different_modes (dense, sparse, colbert),
    default [0.4, 0.2, 0.4]: dense = q . p, sparse = the lexical matching score, colbert = the
    mean MaxSim; sparse+dense = (w_s sparse + w_d dense) / (w_s + w_d); m3 = (w_d dense + w_s
    sparse + w_c colbert) / (w_d + w_s + w_c)."""
    q, *ps = bge_m3_reference(directory, [query, *passages])
    dense = np.asarray([float(q.dense @ p.dense) for p in ps])
    sparse = np.asarray([bge_m3_lexical_score(q.lexical_weights, p.lexical_weights) for p in ps])
    colbert = np.asarray([bge_m3_colbert_score(q.colbert_vecs, p.colbert_vecs) for p in ps])
    w_dense, w_sparse, w_colbert = weights
    return M3Scores(
        dense=dense,
        sparse=sparse,
        colbert=colbert,
        sparse_dense=(w_sparse * sparse + w_dense * dense) / (w_sparse + w_dense),
        m3=(w_dense * dense + w_sparse * sparse + w_colbert * colbert)
        / (w_dense + w_sparse + w_colbert),
    )


# --- catalogue ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ZooModel:
    """One model of the zoo: what to serve it as and how to check it."""

    name: str  # short served name, e.g. "all-mpnet-base-v2"
    imitates: str  # the hub id it imitates
    make: Callable[[Path], Path]
    kind: str  # poolserve kind expected: "embedding" | "cross_encoder" | ...
    settings: dict[str, Any]  # model-file keys a user must set beyond the defaults
    prompt_name: str | None  # a prompt the test should also check with, or None


def _trusts(model: ZooModel) -> bool:
    return bool(model.settings.get("trust_remote_code"))


_REMOTE = {"trust_remote_code": True}
_LLM_RERANKER = {"task": "cross_encoder"}


ZooRow = tuple[str, str, Callable[[Path], Path], str, dict[str, Any], str | None]


def _zoo(rows: Iterable[ZooRow]) -> tuple[ZooModel, ...]:
    return tuple(ZooModel(*row) for row in rows)


# fmt: off
ZOO: tuple[ZooModel, ...] = _zoo([
    ("all-mpnet-base-v2", "sentence-transformers/all-mpnet-base-v2",
     make_all_mpnet_base_v2, "embedding", {}, None),
    ("msmarco-distilbert-base-v4", "sentence-transformers/msmarco-distilbert-base-v4",
     make_msmarco_distilbert_base_v4, "embedding", {}, None),
    ("gtr-t5-base", "sentence-transformers/gtr-t5-base",
     make_gtr_t5_base, "embedding", {}, None),
    ("sentence-t5-base", "sentence-transformers/sentence-t5-base",
     make_sentence_t5_base, "embedding", {}, None),
    ("nomic-embed-text-v1.5", "nomic-ai/nomic-embed-text-v1.5",
     make_nomic_embed_text_v1_5, "embedding", _REMOTE, "search_query"),
    ("gte-base-en-v1.5", "Alibaba-NLP/gte-base-en-v1.5",
     make_gte_base_en_v1_5, "embedding", _REMOTE, None),
    ("jina-embeddings-v2-base-en", "jinaai/jina-embeddings-v2-base-en",
     make_jina_embeddings_v2_base_en, "embedding", _REMOTE, None),
    ("Qwen3-Embedding-0.6B", "Qwen/Qwen3-Embedding-0.6B",
     make_qwen3_embedding_0_6b, "embedding", {}, "query"),
    ("e5-mistral-7b-instruct", "intfloat/e5-mistral-7b-instruct",
     make_e5_mistral_7b_instruct, "embedding", {}, "web_search_query"),
    ("gte-Qwen2-1.5B-instruct", "Alibaba-NLP/gte-Qwen2-1.5B-instruct",
     make_gte_qwen2_1_5b_instruct, "embedding", {}, "query"),
    ("mxbai-embed-large-v1", "mixedbread-ai/mxbai-embed-large-v1",
     make_mxbai_embed_large_v1, "embedding", {}, "query"),
    ("bge-small-en-v1.5", "BAAI/bge-small-en-v1.5",
     make_bge_small_en_v1_5, "embedding", {}, None),
    ("multilingual-e5-small", "intfloat/multilingual-e5-small",
     make_multilingual_e5_small, "embedding", {}, "query"),
    ("multilingual-e5-base", "intfloat/multilingual-e5-base",
     make_multilingual_e5_base, "embedding", {}, "query"),
    ("multilingual-e5-large-instruct", "intfloat/multilingual-e5-large-instruct",
     make_multilingual_e5_large_instruct, "embedding", {}, "web_search_query"),
    ("snowflake-arctic-embed-m", "Snowflake/snowflake-arctic-embed-m",
     make_snowflake_arctic_embed_m, "embedding", {}, "query"),
    ("stella_en_1.5B_v5", "dunzhang/stella_en_1.5B_v5",
     make_stella_en_1_5b_v5, "embedding", {}, "s2p_query"),
    ("mxbai-embed-large-v1-truncated", "mixedbread-ai/mxbai-embed-large-v1",
     make_mxbai_embed_large_v1_truncated, "embedding", {}, "query"),
    ("gte-modernbert-base", "Alibaba-NLP/gte-modernbert-base",
     make_gte_modernbert_base, "embedding", {}, None),
    ("modernbert-embed-base", "nomic-ai/modernbert-embed-base",
     make_modernbert_embed_base, "embedding", {}, "query"),
    ("embeddinggemma-300m", "google/embeddinggemma-300m",
     make_embeddinggemma_300m, "embedding", {}, "query"),
    ("bge-m3", "BAAI/bge-m3",
     make_bge_m3, "embedding", {}, None),
    ("ms-marco-MiniLM-L6-v2", "cross-encoder/ms-marco-MiniLM-L6-v2",
     make_ms_marco_minilm_l6_v2, "cross_encoder", {}, None),
    ("bge-reranker-v2-m3", "BAAI/bge-reranker-v2-m3",
     make_bge_reranker_v2_m3, "cross_encoder", {}, None),
    ("Qwen3-Reranker-0.6B-seq-cls", "tomaarsen/Qwen3-Reranker-0.6B-seq-cls",
     make_qwen3_reranker_0_6b_seq_cls, "cross_encoder", {}, None),
    ("Qwen3-Reranker-0.6B", "Qwen/Qwen3-Reranker-0.6B",
     make_qwen3_reranker_0_6b, "cross_encoder", _LLM_RERANKER, None),
    ("bge-reranker-v2-gemma", "BAAI/bge-reranker-v2-gemma",
     make_bge_reranker_v2_gemma, "cross_encoder", _LLM_RERANKER, None),
    ("jina-reranker-v2-base-multilingual", "jinaai/jina-reranker-v2-base-multilingual",
     make_jina_reranker_v2_base_multilingual, "cross_encoder", _REMOTE, None),
])
# fmt: on
ZOO_BY_NAME: dict[str, ZooModel] = {model.name: model for model in ZOO}
