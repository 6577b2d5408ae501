"""T5 encoders: gtr-t5-base and sentence-t5-base (T5EncoderModel in float16 + Pooling + Dense
+ Normalize) and T5's Unigram tokenizer."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from tests.model_zoo.constants import HIDDEN, INTERMEDIATE, LAYERS
from tests.model_zoo.st_files import st_versions, write_dense, write_pooling, write_st
from tests.model_zoo.tokenizer_files import save_tokenizer
from tests.model_zoo.training import unigram_pieces
from tests.model_zoo.weights import rounded, save_model, seed_torch


def _t5_vocab() -> list[tuple[str, float]]:
    pieces = [(piece, score) for piece, score in unigram_pieces()]
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
    save_tokenizer(
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


def _make_t5(
    directory: Path, *, seed: int, max_seq_length: int, versions: Mapping[str, Any]
) -> Path:
    from transformers import T5Config, T5EncoderModel

    size = _write_t5_tokenizer(directory)
    seed_torch(seed)
    config = T5Config(
        vocab_size=rounded(size, 128),
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
    save_model(
        T5EncoderModel(config), directory, dtype=torch.float16, transformers_version="4.16.2"
    )
    write_st(
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
    write_pooling(directory, HIDDEN, "mean", legacy=True)
    write_dense(directory, "2_Dense", HIDDEN, HIDDEN, bias=False)
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
        versions=st_versions("2.2.0", "4.16.2", "1.10.1+cu113"),
    )


def make_sentence_t5_base(directory: Path) -> Path:
    """sentence-transformers/sentence-t5-base: the same layout as gtr-t5-base (T5EncoderModel in
    float16, Pooling(mean), 2_Dense without bias, 3_Normalize); what differs is
    max_seq_length 256 (gtr-t5-base: 512)."""
    return _make_t5(
        directory,
        seed=4,
        max_seq_length=256,
        versions=st_versions("2.2.0", "4.16.2", "1.10.0+cu113"),
    )
