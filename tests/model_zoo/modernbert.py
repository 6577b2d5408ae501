"""ModernBERT: gte-modernbert-base and modernbert-embed-base, and ModernBERT's byte-level BPE
tokenizer."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from tests.model_zoo.constants import HIDDEN, INTERMEDIATE, LAYERS, MODERNBERT_EMBED_PROMPTS
from tests.model_zoo.st_files import st_versions, write_pooling, write_st
from tests.model_zoo.tokenizer_files import BERT_SPECIALS, save_tokenizer
from tests.model_zoo.training import MODERNBERT_ADDED, modernbert_bpe
from tests.model_zoo.weights import rounded, save_model, seed_torch
from tests.tiny_models import INITIALIZER_RANGE


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

    vocab, merges = modernbert_bpe()
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
    save_tokenizer(
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
    seed_torch(seed)
    config = ModernBertConfig(
        vocab_size=rounded(ids["size"], 64),
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
    save_model(
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
    st_config: dict[str, Any] = st_versions("3.3.1", "4.48.0", "2.5.1+cu124")
    if prompts is not None:
        st_config.update(prompts=dict(prompts), default_prompt_name=None)
    st_config["similarity_fn_name"] = "cosine"
    write_st(directory, modules, max_seq_length=8192, st_config=st_config)
    write_pooling(directory, HIDDEN, mode)
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
