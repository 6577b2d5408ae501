"""Tokenization with the server's own length handling.

Fast tokenizers are not re-entrant, so every CPU-pool thread has its own `TextTokenizer`, built
from the model's tokenizer.json. Truncation and padding saved in that file are switched off (the
bundled MiniLM file truncates and pads at 128): lengths are checked and cut here, per request.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

import numpy as np
from tokenizers import Encoding, Tokenizer

from poolserve.errors import InvalidRequestError
from poolserve.models.kinds import Head

# A token spans at most this many characters in anything but pathological text (long runs of
# spaces, which `TextTokenizer.leading_tokens` still handles exactly).
CHARS_PER_TOKEN = 64
# Which end of a text truncation cuts: its last tokens (right) or its first (left).
Side = Literal["right", "left"]
# Texts of at most this many characters in all are encoded holding the GIL. The batch call
# releases it, and a thread that releases the GIL for a few microseconds of work waits to get
# it back behind any thread running Python (the event loop, a CPU-pool job) for up to
# sys.getswitchinterval(), 5 ms: one sentence at a time beside a thread running Python, 198
# batch calls a second against 19,612 holding it (about 50 µs of work keeps the loop waiting
# no longer than one of its own steps).
HOLD_GIL_CHARS = 2048


@dataclass(frozen=True)
class TokenizedText:
    input_ids: list[int]
    token_type_ids: list[int] | None
    head: Head = "embed"
    # None: every token attends; otherwise 0 marks tokens the model must not attend to.
    attention_mask: list[int] | None = None
    # Tokens before this one are attended to but left out of pooling (a prompt, for a model
    # whose Pooling config says include_prompt: false).
    pool_from: int = 0

    @property
    def cost(self) -> int:
        """Its tokens: what it weighs in a batch (`work.Payload`)."""
        return len(self.input_ids)

    @property
    def held_bytes(self) -> int:
        """Nothing beyond its tokens (`work.Payload`)."""
        return 0

    def cache_key(self) -> tuple[bytes, int]:
        """Everything the model's output for it depends on, as bytes, and their size (the
        result cache's key)."""
        arrays = [self.input_ids, self.token_type_ids or (), self.attention_mask or ()]
        header = np.array([*(len(ids) for ids in arrays), self.pool_from], dtype=np.int32)
        key = b"".join([header.tobytes(), *(np.asarray(a, np.int32).tobytes() for a in arrays)])
        return key, len(key)


class TextTokenizer:
    """One thread's tokenizer."""

    def __init__(self, tokenizer: str | Tokenizer, *, chars_per_token: int | None = None) -> None:
        """Over the tokenizer a tokenizer.json defines (parsed here), or over one parsed
        before (`ModelSpec.tokenizer`: then only one thread at a time may use this one).
        `chars_per_token`: texts cut to N tokens from the right are first cut to N × this many
        characters (model2vec's rule, models/static_layout.py)."""
        self._chars_per_token = chars_per_token
        if isinstance(tokenizer, str):
            tokenizer = Tokenizer.from_str(tokenizer)
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self._tokenizer = tokenizer
        self.num_special_tokens = tokenizer.num_special_tokens_to_add(False)
        self.num_pair_special_tokens = tokenizer.num_special_tokens_to_add(True)
        self.vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
        self._frame: tuple[list[int], list[int]] | None = None
        # Texts tokenized ahead (with special tokens), by text (`primed`).
        self._primed: dict[str, Encoding] = {}

    @contextmanager
    def primed(self, texts: list[str]) -> Iterator[None]:
        """Within: `texts` tokenized (with special tokens) in one call that lets the GIL go,
        where `encode_batch` finds them. A text is tokenized the same whatever comes beside
        it, so what is found is what its own call would make."""
        try:
            encodings = self._tokenizer.encode_batch_fast(texts, add_special_tokens=True)
        except Exception:  # each text's own call then fails its own request, not the others'
            encodings = []
        self._primed = dict(zip(texts, encodings, strict=False))
        try:
            yield
        finally:
            self._primed = {}

    def encode_batch(
        self,
        texts: list[str],
        *,
        truncate_to: int | None,
        add_special_tokens: bool = True,
        side: Side = "right",
        keep_leading_chars: int = 0,
    ) -> list[list[int]]:
        """Token ids of each text; with `truncate_to`, at most that many (special tokens kept),
        the text's last tokens dropped (`side` "right") or its first ("left"). Cutting from the
        left never drops the tokens of the first `keep_leading_chars` characters (a prompt the
        model must see): the tokens right after them go instead."""
        if truncate_to is not None and side == "right" and self._chars_per_token:
            texts = [text[: truncate_to * self._chars_per_token] for text in texts]
        primed = self._primed if add_special_tokens else None
        if primed and all(text in primed for text in texts):
            encodings = [primed[text] for text in texts]
        elif sum(len(text) for text in texts) <= HOLD_GIL_CHARS:
            encode = self._tokenizer.encode
            encodings = [encode(text, add_special_tokens=add_special_tokens) for text in texts]
        else:
            # Without offsets (18 % faster a sentence): a text cut to fit is encoded again.
            encodings = self._tokenizer.encode_batch_fast(
                texts, add_special_tokens=add_special_tokens
            )
        if truncate_to is not None:
            keep = keep_leading_chars if side == "left" else 0
            encodings = [
                self._truncate(text, encoding, truncate_to, add_special_tokens, side, keep)
                if len(encoding) > truncate_to
                else encoding
                for text, encoding in zip(texts, encodings, strict=True)
            ]
        return [encoding.ids for encoding in encodings]

    def encodings(self, texts: list[str], *, add_special_tokens: bool = True) -> list[Encoding]:
        """The tokenizer's full encodings (ids, token strings, offsets, special-token mask)."""
        encodings: list[Encoding] = self._tokenizer.encode_batch(
            texts, add_special_tokens=add_special_tokens
        )
        return encodings

    def encode_pairs(
        self, pairs: list[tuple[str, str]], *, truncate_to: int | None, side: Side = "right"
    ) -> list[tuple[list[int], list[int]]]:
        """Token ids and token type ids of text pairs (a cross-encoder's query and document).

        With `truncate_to`, the longer text loses tokens first (Hugging Face's longest_first),
        from its end (`side` "right") or its start ("left").
        """
        tokenizer = self._tokenizer
        if truncate_to is not None:
            tokenizer.enable_truncation(truncate_to, strategy="longest_first", direction=side)
        try:
            encodings = tokenizer.encode_batch(pairs)
        finally:
            if truncate_to is not None:
                tokenizer.no_truncation()
        return [(encoding.ids, encoding.type_ids) for encoding in encodings]

    def cut_text(self, text: str, max_tokens: int) -> str:
        """The prefix of `text` that holds its first `max_tokens` tokens (no special tokens)."""
        if max_tokens <= 0:
            return ""
        encoding = self.leading_tokens(text, max_tokens)
        if len(encoding) <= max_tokens:
            return text
        return text[: encoding.offsets[max_tokens - 1][1]]

    def leading_tokens(self, text: str, more_than: int) -> Encoding:
        """The tokens of `text` (no special tokens), or of a prefix of it that already has more
        than `more_than`: a long text is decided from its first CHARS_PER_TOKEN x `more_than`
        characters, so a 1 MB text costs no more than its first few kilobytes.

        The prefix ends at a whitespace, where every tokenizer of this field starts a new
        token, so its tokens are the first tokens of the whole text. A text whose prefix has
        few tokens (long runs of spaces) or no whitespace is tokenized whole: its length is
        bounded by the request's size, and nothing that fits is ever refused or cut.
        """
        limit = CHARS_PER_TOKEN * max(more_than, 1)
        if len(text) > limit:
            cut = max(text.rfind(space, 0, limit) for space in " \n\t")
            if cut > 0:
                prefix = self._tokenizer.encode(text[:cut], add_special_tokens=False)
                if len(prefix) > more_than:
                    return prefix
        return self._tokenizer.encode(text, add_special_tokens=False)

    def trailing_tokens(self, text: str, more_than: int) -> tuple[int, Encoding]:
        """`leading_tokens` from the other end: the tokens of a suffix of `text` that already
        has more than `more_than` (or of all of it), and where that suffix starts."""
        limit = CHARS_PER_TOKEN * max(more_than, 1)
        if len(text) > limit:
            starts = [text.find(space, len(text) - limit) for space in " \n\t"]
            cut = min((start for start in starts if start >= 0), default=-1)
            if cut > 0:
                suffix = self._tokenizer.encode(text[cut:], add_special_tokens=False)
                if len(suffix) > more_than:
                    return cut, suffix
        return 0, self._tokenizer.encode(text, add_special_tokens=False)

    def _truncate(
        self,
        text: str,
        encoding: Encoding,
        limit: int,
        add_special_tokens: bool,
        side: Side,
        keep_chars: int = 0,
    ) -> Encoding:
        if not add_special_tokens and not keep_chars:
            encoding.truncate(limit, direction=side)
            return encoding
        room = max(limit - (self.num_special_tokens if add_special_tokens else 0), 0)
        plain = self._tokenizer.encode(text, add_special_tokens=False)
        # The leading tokens that lie wholly within the kept characters.
        kept = sum(1 for _, end in plain.offsets if end <= keep_chars) if keep_chars else 0
        if kept and room > kept:
            tail = self._tokenizer.encode(text, add_special_tokens=False)
            tail.truncate(room - kept, direction="left")
            plain.truncate(kept, direction="right")
            plain = Encoding.merge([plain, tail], growing_offsets=False)
        else:
            plain.truncate(room, direction="right" if kept else side)
        if not add_special_tokens:
            return plain
        return self._tokenizer.post_process(plain, add_special_tokens=True)

    def special_frame(self) -> tuple[list[int], list[int]]:
        """The special tokens the model's post-processor puts before and after one text's
        tokens ([CLS] and [SEP] for BERT): a chunk of a long text is framed by them."""
        if self._frame is None:
            marker = self._tokenizer.encode("a", add_special_tokens=False)
            framed = self._tokenizer.post_process(marker, add_special_tokens=True).ids
            ids = marker.ids
            at = next(i for i in range(len(framed)) if framed[i : i + len(ids)] == ids)
            self._frame = (framed[:at], framed[at + len(ids) :])
        return self._frame

    def check_token_ids(self, ids: list[int], *, param: str) -> None:
        """Raise a 400 for an id outside the vocabulary (the embedding lookup would crash)."""
        for token in ids:
            if not 0 <= token < self.vocab_size:
                raise InvalidRequestError(
                    f"token id {token} is outside the model's vocabulary "
                    f"(0 to {self.vocab_size - 1})",
                    param=param,
                )

    def token_id(self, token: str) -> int | None:
        """The id of one token of the vocabulary, or None."""
        token_id: int | None = self._tokenizer.token_to_id(token)
        return token_id

    def token_strings(self, ids: list[int]) -> list[str]:
        return [self._tokenizer.id_to_token(token) or "" for token in ids]

    def decode(self, ids: list[int], *, skip_special_tokens: bool = False) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)
