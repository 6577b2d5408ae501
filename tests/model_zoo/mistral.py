"""Llama/Mistral-like: e5-mistral-7b-instruct and the Llama/Mistral SentencePiece BPE
tokenizer (byte fallback, </s> appended)."""

from __future__ import annotations

from pathlib import Path

import torch

from tests.model_zoo.constants import (
    BIG_MODEL_MAX_LENGTH,
    E5_MISTRAL_PROMPTS,
    HIDDEN,
    INTERMEDIATE,
    LAYERS,
)
from tests.model_zoo.st_files import st_versions, write_pooling, write_st
from tests.model_zoo.tokenizer_files import save_tokenizer
from tests.model_zoo.training import sentencepiece_bpe
from tests.model_zoo.weights import save_model, seed_torch
from tests.tiny_models import INITIALIZER_RANGE


def _write_llama_tokenizer(
    directory: Path, *, add_eos_token: bool, model_max_length: int = BIG_MODEL_MAX_LENGTH
) -> int:
    """Llama / Mistral's SentencePiece BPE with byte fallback: <unk>=0 <s>=1 </s>=2, the byte
    tokens, the pieces; Metaspace with "▁" prepended to the first word; `<s> A` (and ` </s>` with
    `add_eos_token`, as e5-mistral-7b-instruct's sentence-transformers version). Pads with </s>.
    Returns the vocabulary size."""
    from transformers import LlamaTokenizer

    vocab, merges = sentencepiece_bpe("llama")
    tokenizer = LlamaTokenizer(
        vocab=dict(vocab),
        merges=list(merges),
        add_bos_token=True,
        add_eos_token=add_eos_token,
        pad_token="</s>",
    )
    specials = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "</s>", "unk_token": "<unk>"}
    save_tokenizer(
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
    seed_torch(9)
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
    save_model(
        MistralModel(config),
        directory,
        dtype=torch.float16,
        transformers_version="4.34.0",
        drop=("layer_types",),
    )
    write_st(
        directory,
        [("", "Transformer"), ("1_Pooling", "Pooling"), ("2_Normalize", "Normalize")],
        max_seq_length=4096,
        st_config={
            **st_versions("2.7.0.dev0", "4.39.3", "2.2.2+cu121"),
            "prompts": E5_MISTRAL_PROMPTS,
            "default_prompt_name": None,
        },
    )
    write_pooling(directory, HIDDEN, "lasttoken")
    return directory
