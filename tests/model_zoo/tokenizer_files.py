"""Tokenizer files shared by several families, written as the hub repositories carry them:
tokenizer.json as the family's transformers class writes it, tokenizer_config.json (transformers
4.x style, with `added_tokens_decoder`) and special_tokens_map.json. bert-base-uncased's WordPiece
(copied from the bundled MiniLM), XLM-RoBERTa's Unigram, Qwen's byte-level BPE and Gemma's
SentencePiece BPE."""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.model_zoo.constants import BIG_MODEL_MAX_LENGTH
from tests.model_zoo.training import qwen_bpe, sentencepiece_bpe, unigram_pieces
from tests.tiny_models import _read_json, _write_json, minilm_path


def _added_tokens_decoder(directory: Path) -> dict[str, dict[str, Any]]:
    """tokenizer_config.json's `added_tokens_decoder`, from tokenizer.json's added tokens."""
    keys = ("content", "lstrip", "normalized", "rstrip", "single_word", "special")
    added = _read_json(directory / "tokenizer.json")["added_tokens"]
    return {str(token["id"]): {key: token[key] for key in keys} for token in added}


def save_tokenizer(
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


def write_bert_tokenizer(
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


def _xlmr_vocab() -> list[tuple[str, float]]:
    pieces = [(piece, score) for piece, score in unigram_pieces()]
    return [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), *pieces, ("<mask>", 0.0)]


def write_xlmr_tokenizer(directory: Path, *, model_max_length: int = 512) -> int:
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
    save_tokenizer(
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
QWEN_EXTRA_SPECIALS = ("<|im_start|>", "<|im_end|>")  # additional_special_tokens


def _qwen_tokenizer(
    vocab: dict[str, int],
    merges: Sequence[tuple[str, str]],
    *,
    eos_token: str,
    append_endoftext: bool,
) -> Any:
    """The Qwen2Tokenizer over `vocab` (the specials included) and `merges`, with <think> and
    </think> added (not special) and, with `append_endoftext`, the post-processor
    `$A <|endoftext|>`."""
    from tokenizers import AddedToken, processors
    from transformers import Qwen2Tokenizer

    tokenizer = Qwen2Tokenizer(
        vocab=vocab,
        merges=list(merges),
        unk_token=None,
        bos_token=None,
        eos_token=eos_token,
        pad_token="<|endoftext|>",
        extra_special_tokens=list(QWEN_EXTRA_SPECIALS),
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
    return tokenizer


def _qwen_tokenizer_config(
    *, eos_token: str, padding_side: str | None, model_max_length: int
) -> dict[str, Any]:
    """Qwen's tokenizer_config.json keys (without `added_tokens_decoder`)."""
    config: dict[str, Any] = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "additional_special_tokens": list(QWEN_EXTRA_SPECIALS),
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
    return config


def write_qwen_tokenizer(
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
    base, merges = qwen_bpe()
    vocab = dict(base)
    for token in QWEN_SPECIALS:
        vocab[token] = len(vocab)
    tokenizer = _qwen_tokenizer(
        vocab, merges, eos_token=eos_token, append_endoftext=append_endoftext
    )
    save_tokenizer(
        tokenizer,
        directory,
        _qwen_tokenizer_config(
            eos_token=eos_token, padding_side=padding_side, model_max_length=model_max_length
        ),
        {
            "additional_special_tokens": list(QWEN_EXTRA_SPECIALS),
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


def write_gemma_tokenizer(
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

    vocab, merges = sentencepiece_bpe("gemma")
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
    save_tokenizer(
        tokenizer, directory, config, {"additional_special_tokens": extra_special, **specials}
    )
    return len(vocab)
