"""Independent references for the tests: sentence-transformers vectors, token counts, test inputs.

Nothing here imports poolserve: token counts come from the Hugging Face tokenizer and vectors from
sentence-transformers, so that a test compares poolserve with something it does not share code with.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

MAX_LEN = 256  # all-MiniLM-L6-v2's max_seq_length (sentence_bert_config.json)
DIM = 384
MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
FP32_COSINE = 0.99999
BF16_COSINE = 0.999

_PROSE = """
The quick brown fox jumps over the lazy dog while the river keeps running toward the sea. Serving
embedding models well means batching requests from many clients, keeping the event loop free and
measuring every claim. A library in the old town kept maps of coastlines that no longer exist,
drawn by sailors who trusted the stars more than their instruments. Tokenization splits words into
pieces; rare words such as photosynthesis, antidisestablishmentarianism or Kubernetes break into
several of them. In spring the orchard bloomed, bees returned, and the farmer counted seventeen
new lambs before breakfast. Quantum computers promise speedups for chemistry simulations, yet
error correction remains the hard engineering problem of the decade.
"""
WORDS = _PROSE.split()

SHORT = [
    "hello world",
    "a",
    "x",
    "OK",
    "42",
    "3.14159",
    "e = mc^2",
    "I",
    "Yes.",
    "no",
    "The cat sat on the mat.",
    "What is the capital of France?",
    "Paris is the capital of France.",
    "How do I reset my password?",
    "Embeddings map text to vectors.",
    "sunny weather today",
    "the the the the",
    "COVID-19 vaccine efficacy",
    "user@example.com",
    "https://example.com/path?query=1&x=2",
    "C++ templates vs Rust generics",
    "def f(x): return x * 2",
    '{"key": "value", "n": [1, 2, 3]}',
    "SELECT * FROM users WHERE id = 7;",
    "2024-05-17T12:34:56Z",
    "+1 (555) 123-4567",
    "$1,000,000.00",
    "50% off!!!",
    "iPhone 15 Pro Max",
    "New York, NY 10001",
]

UNICODE = [
    "日本語のテキストです。",
    "中文句子测试，包含标点符号。",
    "한국어 문장입니다",
    "Привет, как дела?",
    "Γειά σου Κόσμε",
    "مرحبا بالعالم",
    "שלום עולם",
    "नमस्ते दुनिया",
    "สวัสดีชาวโลก",
    "café naïve résumé façade",
    "e\u0301 combining acute",
    "a\u200bb zero width space",
    "ＡＢＣ full-width ｔｅｘｔ",
    "∑∫√∞ ≠ ≤ ≥ ∂",
    "😀",
    "🎉👍🏽🔥💯",
    "🇺🇸 🇯🇵 🇩🇪 flags",
    "I love 🍕 and 🍣 equally",
    "👨‍👩‍👧‍👦 family emoji",
    "Tokyo 東京 Tōkyō",
    "混合 mixed 言語 text テキスト",
    "Ünïcödé Ŧęxŧ wïth ďïäçřïţïçš",
    "ß ẞ æ œ ø å",
    "™ © ® ° ± µ ¶",
    "\u00a0non-breaking\u00a0spaces\u00a0",
    "ideographic\u3000space",
    "right-to-left \u202emark",
    "ｶﾀｶﾅ half-width",
    "漢字" * 20,
    "🙂" * 30,
]

# Inputs with no text: refused with one rule everywhere (HTTP and Python).
BLANK = ["", " ", "   ", "\t", "\n", "\n\n\n", " \t \n ", "\u3000"]
WHITESPACE = [
    " leading space",
    "trailing space ",
    "  both sides  ",
    "multiple     inner     spaces",
    "tabs\tbetween\twords",
    "new\nlines\nbetween\nwords",
    "\r\nwindows line ending\r\n",
    "mixed \t\n whitespace \r everywhere",
    "\u2003em space and\u2009thin space",
]

PUNCTUATION = [
    "!!!",
    "...",
    "?!?!",
    "(){}[]<>",
    "@#$%^&*",
    "— – - ‐",
    "“smart quotes” and ‘single’",
    "'straight' \"double\"",
    "<html><body><p>Hi</p></body></html>",
    "a,b;c:d.e!f?g",
    "--flag=value --other",
    "....................",
    "#hashtag @mention",
    "\\backslash\\path\\",
    "~`|^_",
    "¿Qué? ¡Sí!",
    "«guillemets» „low quotes“",
    "...and then?!",
    "* bullet\n* list\n* items",
    "1. first 2. second 3. third",
]


@dataclass
class Corpus:
    """Varied inputs: `within` fit the model, `over` need truncation; references filled later."""

    within: list[str]
    over: list[str]
    within_tokens: list[int]
    over_tokens: list[int]
    ref_within: np.ndarray = field(default_factory=lambda: np.zeros((0, DIM), np.float32))
    ref_over: np.ndarray = field(default_factory=lambda: np.zeros((0, DIM), np.float32))


def token_count(tokenizer: Any, text: str) -> int:
    """Tokens of `text` with the special tokens, never truncated (the HF tokenizer)."""
    return len(tokenizer(text, add_special_tokens=True, truncation=False)["input_ids"])


def token_ids(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=True, truncation=False)["input_ids"])


def _single_token_words(tokenizer: Any) -> list[str]:
    words = sorted({word.strip(".,;").lower() for word in WORDS})
    return [w for w in words if w and len(tokenizer(w, add_special_tokens=False)["input_ids"]) == 1]


def text_with_tokens(tokenizer: Any, n: int, seed: int, prefix: str = "") -> str:
    """A text of exactly `n` tokens (special tokens included): varied prose, then filler words."""
    rng = random.Random(seed)
    fillers = _single_token_words(tokenizer)
    words = prefix.split()
    # Varied content (multi-token words included) up to about three quarters of the target.
    while token_count(tokenizer, " ".join([*words, "x"])) < max(3 * n // 4, 3):
        words.append(rng.choice(WORDS))
    while token_count(tokenizer, " ".join(words)) > n:
        words.pop()
    # Each filler is one token, and whitespace keeps it one token next to any neighbour.
    words += [rng.choice(fillers) for _ in range(n - token_count(tokenizer, " ".join(words)))]
    text = " ".join(words)
    assert token_count(tokenizer, text) == n, (n, token_count(tokenizer, text))
    return text


def prose(rng: random.Random, n_words: int) -> str:
    start = rng.randrange(len(WORDS))
    return " ".join(WORDS[(start + i) % len(WORDS)] for i in range(n_words))


def build_corpus(tokenizer: Any) -> Corpus:
    """At least 200 inputs: short, long, unicode, whitespace, punctuation, exactly at the limit."""
    rng = random.Random(20240517)
    within: list[str] = [*SHORT, *UNICODE, *WHITESPACE, *PUNCTUATION]
    within += [prose(rng, rng.randint(2, 25)) for _ in range(57)]
    within += [prose(rng, rng.randint(30, 150)) for _ in range(30)]
    within += [rng.choice(UNICODE) + " " + prose(rng, rng.randint(5, 40)) for _ in range(15)]
    # Right at the limit (and around 128, the length the tokenizer file itself would cut at).
    for seed, n in enumerate([256, 256, 256, 256, 255, 255, 255, 254, 250, 200, 129, 128, 127]):
        within.append(text_with_tokens(tokenizer, n, seed, prefix=UNICODE[seed % len(UNICODE)]))
    over = [
        text_with_tokens(tokenizer, n, 100 + seed)
        for seed, n in enumerate([257, 258, 300, 384, 511, 513, 700])
    ]
    over += [prose(rng, 900), "漢字テキスト " * 200, "🙂 " * 400, "word " * 2000]
    within_tokens = [token_count(tokenizer, text) for text in within]
    over_tokens = [token_count(tokenizer, text) for text in over]
    assert len(within) >= 200
    assert max(within_tokens) == MAX_LEN
    assert min(over_tokens) > MAX_LEN
    return Corpus(within, over, within_tokens, over_tokens)


@contextmanager
def max_seq_length(st_model: Any, length: int) -> Iterator[None]:
    old = st_model.max_seq_length
    st_model.max_seq_length = length
    try:
        yield
    finally:
        st_model.max_seq_length = old


def st_encode(
    st_model: Any,
    texts: Sequence[str],
    *,
    max_length: int = MAX_LEN,
    normalize: bool = True,
) -> np.ndarray:
    """sentence-transformers' vectors in float32; unnormalized ones skip its Normalize module."""
    from sentence_transformers import SentenceTransformer

    model = st_model
    if not normalize:
        modules = [m for m in st_model if type(m).__name__ != "Normalize"]
        model = SentenceTransformer(modules=modules, device="cpu")
    with max_seq_length(st_model, max_length):
        vectors = model.encode(
            list(texts),
            normalize_embeddings=normalize,
            convert_to_numpy=True,
            batch_size=64,
        )
    return np.asarray(vectors, dtype=np.float32)


def cosines(a: Any, b: Any) -> np.ndarray:
    """Row-wise cosine similarity, computed in float64."""
    a = np.atleast_2d(np.asarray(a, dtype=np.float64))
    b = np.atleast_2d(np.asarray(b, dtype=np.float64))
    assert a.shape == b.shape, (a.shape, b.shape)
    return np.asarray((a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)))


def assert_close_vectors(
    actual: Any, expected: Any, threshold: float = FP32_COSINE, labels: Sequence[str] = ()
) -> None:
    """Every row's cosine with the reference is at least `threshold`; names the worst row."""
    cos = cosines(actual, expected)
    worst = int(np.argmin(cos))
    label = repr(labels[worst][:60]) if labels else str(worst)
    assert cos[worst] >= threshold, f"cosine {cos[worst]:.7f} < {threshold} for input {label}"


def norms(vectors: Any) -> np.ndarray:
    return np.asarray(np.linalg.norm(np.asarray(vectors, dtype=np.float64), axis=1))
