"""Tokenizer training: the training text every machine has, and the BPE vocabularies (byte-level,
SentencePiece-style with byte fallback, ModernBERT's) and Unigram pieces trained on it, offline and
deterministically, with the `tokenizers` library."""

from __future__ import annotations

import functools
import json
import math
from collections import Counter
from collections.abc import Sequence
from importlib.metadata import distribution
from typing import Any

from tests.model_zoo.constants import TRAINED_VOCAB, UNIGRAM_PIECES
from tests.tiny_models import minilm_path

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


@functools.cache
def corpus() -> tuple[str, ...]:
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
    """A BPE vocabulary (special tokens first, in order) and its merges, trained on `corpus()`."""
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
    tokenizer.train_from_iterator(corpus(), trainer)
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
    for line in corpus():
        counts.update(line.replace(" ", space))
    counts[space] += 1  # Metaspace's prepended "▁" is in the alphabet even without a space
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return [character for character, _ in ranked[:count]]


@functools.cache
def qwen_bpe() -> tuple[dict[str, int], tuple[tuple[str, str], ...]]:
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
def sentencepiece_bpe(family: str) -> tuple[dict[str, int], tuple[tuple[str, str], ...]]:
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
def modernbert_bpe() -> tuple[dict[str, int], tuple[tuple[str, str], ...]]:
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
def unigram_pieces() -> tuple[tuple[str, float], ...]:
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
    for encoding in bpe.encode_batch(list(corpus())):
        for token_id in encoding.ids:
            counts[id_to_piece[token_id]] += 1
    total = sum(counts.values())
    scores = {piece: math.log(count / total) for piece, count in counts.items() if count}
    floor = min(scores.values()) - 1.0
    scored = [(piece, scores.get(piece, floor)) for piece in vocab]
    return tuple(sorted(scored, key=lambda item: (-item[1], item[0])))


# --- tokenizer files ----------------------------------------------------------------------------
