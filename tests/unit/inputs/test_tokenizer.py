"""The per-thread tokenizer against the Hugging Face tokenizer that sentence-transformers uses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from poolserve.inputs.tokenizer import HOLD_GIL_CHARS, TextTokenizer
from tests.reference import Corpus


@pytest.fixture(scope="module")
def tokenizer(model_path: Path) -> TextTokenizer:
    return TextTokenizer((model_path / "tokenizer.json").read_text(encoding="utf-8"))


def test_counts(tokenizer: TextTokenizer, hf_tokenizer: Any) -> None:
    assert tokenizer.num_special_tokens == 2  # [CLS] ... [SEP]
    assert tokenizer.vocab_size == len(hf_tokenizer) == 30522


def test_ids_match_the_reference_without_the_files_own_truncation(
    tokenizer: TextTokenizer, hf_tokenizer: Any, corpus: Corpus
) -> None:
    """tokenizer.json itself truncates at 128 and pads; that must be switched off."""
    texts = corpus.within + corpus.over
    expected = [hf_tokenizer(t, truncation=False)["input_ids"] for t in texts]
    assert tokenizer.encode_batch(texts, truncate_to=None) == expected
    assert max(len(ids) for ids in expected) > 128


@pytest.mark.parametrize("limit", [2, 3, 17, 128, 255, 256])
def test_truncation_keeps_the_special_tokens(
    tokenizer: TextTokenizer, hf_tokenizer: Any, corpus: Corpus, limit: int
) -> None:
    texts = corpus.over[:4] + corpus.within[:20]
    expected = [hf_tokenizer(t, truncation=True, max_length=limit)["input_ids"] for t in texts]
    actual = tokenizer.encode_batch(texts, truncate_to=limit)
    assert actual == expected
    assert all(ids[0] == 101 and ids[-1] == 102 for ids in actual)


def test_without_special_tokens(tokenizer: TextTokenizer, hf_tokenizer: Any) -> None:
    text = "Hello, wonderful world!"
    expected = hf_tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.encode_batch([text], truncate_to=None, add_special_tokens=False) == [expected]
    cut = tokenizer.encode_batch([text], truncate_to=2, add_special_tokens=False)
    assert cut == [expected[:2]]


def test_token_strings_and_decode(tokenizer: TextTokenizer, hf_tokenizer: Any) -> None:
    text = "Tokenization of photosynthesis"
    ids = hf_tokenizer(text)["input_ids"]
    assert tokenizer.token_strings(ids) == hf_tokenizer.convert_ids_to_tokens(ids)
    assert tokenizer.decode(ids) == hf_tokenizer.decode(ids)


def test_a_few_texts_and_many_give_the_same_ids(
    tokenizer: TextTokenizer, hf_tokenizer: Any, corpus: Corpus
) -> None:
    """A few short texts are encoded one by one holding the GIL; many, in one batch call that
    releases it: the same ids either way."""
    texts = [text for text in corpus.within + corpus.over if len(text) <= HOLD_GIL_CHARS]
    assert sum(map(len, texts)) > HOLD_GIL_CHARS  # all of them: the batch call
    expected = [hf_tokenizer(t, truncation=False)["input_ids"] for t in texts]
    assert tokenizer.encode_batch(texts, truncate_to=None) == expected
    assert [tokenizer.encode_batch([t], truncate_to=None)[0] for t in texts] == expected
    assert [tokenizer.encode_batch([t], truncate_to=5)[0] for t in texts] == [
        hf_tokenizer(t, truncation=True, max_length=5)["input_ids"] for t in texts
    ]
