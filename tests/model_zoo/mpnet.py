"""MPNet: all-mpnet-base-v2 and its tokenizer (bert-base-uncased's WordPiece behind MPNet's
<s> <pad> </s> <unk> ... <mask>)."""

from __future__ import annotations

from pathlib import Path

import torch

from tests.model_zoo.constants import BERT_VOCAB, HIDDEN, INTERMEDIATE, LAYERS
from tests.model_zoo.st_files import st_versions, write_pooling, write_st
from tests.model_zoo.tokenizer_files import save_tokenizer
from tests.model_zoo.weights import save_model, seed_torch
from tests.tiny_models import INITIALIZER_RANGE, minilm_path


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
    save_tokenizer(
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


def make_all_mpnet_base_v2(directory: Path) -> Path:
    """sentence-transformers/all-mpnet-base-v2: config.json says architectures
    ["MPNetForMaskedLM"] (as the real one) over weights of an MPNetModel without its pooler, so
    `AutoModel` (MPNetModel) loads them with only pooler.dense newly initialised (the real repo
    does the same; the pooler is not used). MPNet's WordPiece tokenizer (<s>=0 <pad>=1 </s>=2
    <unk>=3 ... <mask>=30526), Transformer + Pooling(mean, the five keys of sentence-transformers
    2.0) + Normalize, max_seq_length 384, config.json without torch_dtype (transformers 4.8)."""
    from transformers import MPNetConfig, MPNetModel

    _write_mpnet_tokenizer(directory)
    seed_torch(1)
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
    save_model(
        MPNetModel(config, add_pooling_layer=False),
        directory,
        dtype=torch.float32,
        transformers_version="4.8.2",
        keep_dtype_key=False,
        architectures=["MPNetForMaskedLM"],
    )
    write_st(
        directory,
        [("", "Transformer"), ("1_Pooling", "Pooling"), ("2_Normalize", "Normalize")],
        max_seq_length=384,
        st_config=st_versions("2.0.0", "4.6.1", "1.8.1"),
    )
    write_pooling(directory, HIDDEN, "mean", legacy=True)
    return directory
