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


def test_texts_primed_together_give_each_texts_own_ids(
    model_path: Path, hf_tokenizer: Any, corpus: Corpus
) -> None:
    """A runner tokenizes the texts of every request it prepares at once in one call
    (engine/preparations.py); each request then finds its texts' ids made, equal to the
    reference's, cut as it asks. Texts not primed, or asked without special tokens, are
    tokenized by their own call."""
    tokenizer = TextTokenizer((model_path / "tokenizer.json").read_text(encoding="utf-8"))
    primed = corpus.within[:6] + corpus.over[:2]
    calls: list[int] = []
    inner = tokenizer._tokenizer  # the parsed tokenizer: counting its one-text calls

    class Counting:
        def __getattr__(self, name: str) -> Any:
            return getattr(inner, name)

        def encode(self, text: str, **kwargs: Any) -> Any:
            calls.append(len(text))
            return inner.encode(text, **kwargs)

    tokenizer._tokenizer = Counting()  # type: ignore[assignment]
    with tokenizer.primed(primed):
        for text in primed:
            assert tokenizer.encode_batch([text], truncate_to=None) == [
                hf_tokenizer(text, truncation=False)["input_ids"]
            ]
        assert calls == []
        for text in primed:  # (a long text cut to fit is tokenized again, cut)
            assert tokenizer.encode_batch([text], truncate_to=9) == [
                hf_tokenizer(text, truncation=True, max_length=9)["input_ids"]
            ]
        calls.clear()
        other = corpus.within[10]
        assert tokenizer.encode_batch([other], truncate_to=None) == [
            hf_tokenizer(other, truncation=False)["input_ids"]
        ]
        bare = tokenizer.encode_batch([primed[0]], truncate_to=None, add_special_tokens=False)
        assert bare == [hf_tokenizer(primed[0], add_special_tokens=False)["input_ids"]]
        assert calls == [len(other), len(primed[0])]
    tokenizer.encode_batch([primed[1]], truncate_to=None)
    assert calls[-1] == len(primed[1])  # outside: tokenized anew


def test_a_failing_batch_call_leaves_each_text_to_its_own(
    model_path: Path, hf_tokenizer: Any
) -> None:
    """Should the one call for every preparation's texts fail, each request's texts are
    tokenized by their own call (whose error, if any, is that request's alone)."""
    tokenizer = TextTokenizer((model_path / "tokenizer.json").read_text(encoding="utf-8"))
    inner = tokenizer._tokenizer

    class Failing:
        def __getattr__(self, name: str) -> Any:
            return getattr(inner, name)

        def encode_batch_fast(self, texts: list[str], **kwargs: Any) -> Any:
            raise RuntimeError("broken")

    tokenizer._tokenizer = Failing()  # type: ignore[assignment]
    with tokenizer.primed(["a text", "another"]):
        assert tokenizer.encode_batch(["a text"], truncate_to=None) == [
            hf_tokenizer("a text", truncation=False)["input_ids"]
        ]
