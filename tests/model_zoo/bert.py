"""BERT-like sentence-transformers models and cross-encoders: msmarco-distilbert-base-v4
(DistilBERT), mxbai-embed-large-v1 (and its truncate_dim copy), bge-small-en-v1.5,
snowflake-arctic-embed-m, multilingual-e5-small (a BertModel behind an XLM-RoBERTa tokenizer) and
ms-marco-MiniLM-L6-v2."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from tests.model_zoo.constants import (
    BERT_VOCAB,
    E5_PROMPTS,
    HIDDEN,
    INTERMEDIATE,
    LAYERS,
    MATRYOSHKA_TRUNCATE_DIM,
    RETRIEVAL_QUERY_PROMPT,
)
from tests.model_zoo.st_files import st_versions, write_pooling, write_st
from tests.model_zoo.tokenizer_files import write_bert_tokenizer, write_xlmr_tokenizer
from tests.model_zoo.weights import save_model, seed_torch
from tests.tiny_models import INITIALIZER_RANGE, make_cross_encoder


def bert_config(vocab_size: int = BERT_VOCAB, **extra: Any) -> Any:
    """The zoo's BertConfig (2 layers, 32 wide, 2 heads) over `vocab_size` tokens."""
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


def write_bert_model(directory: Path, seed: int, transformers_version: str, **extra: Any) -> None:
    """A BertModel (with its pooler, as BERT checkpoints saved by sentence-transformers carry it)
    and the bundled bert-base-uncased tokenizer."""
    from transformers import BertModel

    write_bert_tokenizer(directory)
    seed_torch(seed)
    model = BertModel(bert_config(**extra))
    save_model(model, directory, dtype=torch.float32, transformers_version=transformers_version)


def make_msmarco_distilbert_base_v4(directory: Path) -> Path:
    """sentence-transformers/msmarco-distilbert-base-v4: DistilBertModel (its config has `dim`,
    `n_layers`, `n_heads`, `hidden_dim`, no hidden_size key), DistilBertTokenizer (no token type
    ids: DistilBertModel.forward takes none), Transformer + Pooling(mean), no Normalize."""
    from transformers import DistilBertConfig, DistilBertModel

    write_bert_tokenizer(directory, tokenizer_class="DistilBertTokenizer")
    seed_torch(2)
    config = DistilBertConfig(
        vocab_size=BERT_VOCAB,
        dim=HIDDEN,
        n_layers=LAYERS,
        n_heads=2,
        hidden_dim=INTERMEDIATE,
        max_position_embeddings=512,
        initializer_range=INITIALIZER_RANGE,
    )
    save_model(
        DistilBertModel(config),
        directory,
        dtype=torch.float32,
        transformers_version="4.7.0",
        keep_dtype_key=False,
    )
    write_st(
        directory,
        [("", "Transformer"), ("1_Pooling", "Pooling")],
        max_seq_length=512,
        st_config=st_versions("2.0.0", "4.7.0", "1.9.0+cu102"),
    )
    write_pooling(directory, HIDDEN, "mean", legacy=True)
    return directory


def make_mxbai_embed_large_v1(directory: Path, *, truncate_dim: int | None = None) -> Path:
    """mixedbread-ai/mxbai-embed-large-v1: BertModel, Transformer + Pooling(cls), no Normalize
    module, prompts query ("Represent this sentence for searching relevant passages: ") and
    passage (""), max_seq_length 512. A Matryoshka model: its first dimensions are an embedding
    too. With `truncate_dim` config_sentence_transformers.json carries "truncate_dim" (see
    `make_mxbai_embed_large_v1_truncated`)."""
    write_bert_model(directory, 11, "4.37.0")
    st_config: dict[str, Any] = {
        **st_versions("2.3.1", "4.37.0", "2.1.2+cu121"),
        "prompts": {"query": RETRIEVAL_QUERY_PROMPT, "passage": ""},
        "default_prompt_name": None,
    }
    if truncate_dim is not None:
        st_config.update(similarity_fn_name="cosine", truncate_dim=truncate_dim)
    write_st(
        directory,
        [("", "Transformer"), ("1_Pooling", "Pooling")],
        max_seq_length=512,
        st_config=st_config,
    )
    write_pooling(directory, HIDDEN, "cls")
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
    write_bert_model(directory, 12, "4.30.0")
    write_st(
        directory,
        [("", "Transformer"), ("1_Pooling", "Pooling"), ("2_Normalize", "Normalize")],
        max_seq_length=512,
        do_lower_case=True,
        st_config=st_versions("2.2.2", "4.28.1", "1.13.0+cu117"),
    )
    write_pooling(directory, HIDDEN, "cls", legacy=True)
    return directory


def make_multilingual_e5_small(directory: Path) -> Path:
    """intfloat/multilingual-e5-small: a BertModel (architectures ["BertModel"]) behind an
    XLM-RoBERTa SentencePiece tokenizer (tokenizer_class XLMRobertaTokenizer, as the real one:
    <s>=0 <pad>=1 </s>=2 <unk>=3, no token type ids), Transformer + Pooling(mean) + Normalize,
    prompts query ("query: ") and passage ("passage: "), max_seq_length 512."""
    from transformers import BertModel

    size = write_xlmr_tokenizer(directory)
    seed_torch(13)
    save_model(
        BertModel(bert_config(vocab_size=size, pad_token_id=1)),
        directory,
        dtype=torch.float32,
        transformers_version="4.29.0.dev0",
    )
    write_st(
        directory,
        [("", "Transformer"), ("1_Pooling", "Pooling"), ("2_Normalize", "Normalize")],
        max_seq_length=512,
        st_config={
            **st_versions("2.2.2", "4.29.0.dev0", "1.13.1+cu117"),
            "prompts": E5_PROMPTS,
            "default_prompt_name": None,
        },
    )
    write_pooling(directory, HIDDEN, "mean", legacy=True)
    return directory


def make_snowflake_arctic_embed_m(directory: Path) -> Path:
    """Snowflake/snowflake-arctic-embed-m: BertModel, Transformer + Pooling(cls) + Normalize,
    prompt query ("Represent this sentence for searching relevant passages: "), max_seq_length
    512."""
    write_bert_model(directory, 16, "4.39.3")
    write_st(
        directory,
        [("", "Transformer"), ("1_Pooling", "Pooling"), ("2_Normalize", "Normalize")],
        max_seq_length=512,
        st_config={
            **st_versions("2.7.0", "4.39.3", "2.1.0+cu121"),
            "prompts": {"query": RETRIEVAL_QUERY_PROMPT},
            "default_prompt_name": None,
        },
    )
    write_pooling(directory, HIDDEN, "cls", legacy=True)
    return directory


def make_ms_marco_minilm_l6_v2(directory: Path) -> Path:
    """cross-encoder/ms-marco-MiniLM-L6-v2: `tests.tiny_models.make_cross_encoder` in its "st4"
    layout (BertForSequenceClassification, 1 label, the activation in config.json)."""
    return make_cross_encoder(directory, layout="st4")
