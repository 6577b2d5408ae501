"""Long inputs as chunks, planned from one tokenization of the whole input.

- **split** (vLLM's chunked processing): an input longer than a chunk is cut into chunks of at
  most `size` of its own tokens (default: as many as fit beside the model's special tokens and
  the prompt, which every chunk carries), at word starts where the text has them, neighbours
  sharing up to `overlap` tokens (from a word start); each chunk is
  pooled on its own, in the same batches as everything else, and the input's vector is the mean
  of the chunks' pooled vectors weighted by their own tokens, then post-processed (sliced,
  normalized) as any vector.
- **late** (Jina's late chunking): the document runs through the model whole (in windows of the
  model's length, overlapping by a quarter where it is longer: each token's vector comes from the
  window where it sits farthest from an edge), and each span's vector is the mean of its tokens'
  vectors (the model's `token_embed` output, as `/pooling` gives it), so every span sees its
  context.

A chunk or span is told by its tokens (the input's own, no prompt or special token: [start,
end)) and, for a text, its characters ([start, end) in the text as sent).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from poolserve.errors import InvalidRequestError

ChunkMethod = Literal["split", "late"]

Range = tuple[int, int]


@dataclass(frozen=True)
class Chunking:
    """How a request chunks its inputs (checked against the model as each is planned)."""

    method: ChunkMethod = "split"
    # Own tokens per chunk (split; default: the most that fit) or per span (late).
    size: int | None = None
    # Tokens neighbouring chunks share (split), or windows share (late; default a quarter).
    overlap: int | None = None
    # Late: the spans to embed, as character ranges of the text.
    spans: tuple[Range, ...] | None = None

    def __post_init__(self) -> None:
        if self.spans is not None and self.method != "late":
            raise InvalidRequestError(
                'chunking.spans are late chunking\'s; pass "method": "late" with them, or '
                "leave them out to split the input in chunks of chunking.size",
                param="chunking",
            )
        if self.spans is not None and self.size is not None:
            raise InvalidRequestError(
                "chunking.spans and chunking.size both say where late chunking's spans are; "
                "pass one of them",
                param="chunking",
            )


@dataclass(frozen=True)
class Span:
    tokens: Range
    chars: Range | None


@dataclass(frozen=True)
class ChunkPlan:
    """How one input runs and how its parts' outputs become its vectors."""

    # The own-token range of each part (a chunk, or a late window).
    windows: tuple[Range, ...]
    # The chunks (split: one per window) or the spans (late), as the answer tells them.
    spans: tuple[Span, ...]
    # The output row of each window's first own token (after special tokens and the prompt).
    first_row: int = 0
    late: bool = False


def windows_over(count: int, size: int, overlap: int) -> list[Range]:
    """Ranges of at most `size` covering [0, count), each starting `size - overlap` after the
    one before."""
    ranges = [(0, min(size, count))]
    while ranges[-1][1] < count:
        start = ranges[-1][1] - overlap
        ranges.append((start, min(start + size, count)))
    return ranges


def word_windows(words: Sequence[int | None], size: int, overlap: int) -> list[Range]:
    """`windows_over` for a text, with each cut moved back to the start of a word (of the
    tokenizer's pre-tokenizer: `words` holds each token's) where one is in the window's second
    half, and each overlap begun at a word: a chunk's characters then hold whole words, which
    tokenize alone as they did in the text."""
    count = len(words)

    def starts_word(index: int) -> bool:
        return words[index] != words[index - 1]

    ranges: list[Range] = []
    start = 0
    while True:
        end = min(start + size, count)
        if end < count:
            cut = next((i for i in range(end, start + size // 2, -1) if starts_word(i)), end)
            end = cut
        ranges.append((start, end))
        if end == count:
            return ranges
        following = max(end - overlap, start + 1)
        start = next((i for i in range(following, end) if starts_word(i)), following)


def plan_chunks(
    count: int,
    offsets: Sequence[Range] | None,
    room: int,
    chunking: Chunking,
    first_row: int,
    words: Sequence[int | None] | None = None,
) -> ChunkPlan:
    """The plan for an input of `count` own tokens (`offsets`: their characters, `words`:
    their words; None for token ids), `room` of which fit in one pass beside the frame; raises
    a 400 for settings that cannot work for this model."""
    if chunking.method == "late":
        return _late_plan(count, offsets, room, chunking, first_row)
    size = chunking.size or room
    if size > room:
        raise InvalidRequestError(
            f"chunking.size {size} is more than one chunk of this model holds ({room} tokens "
            "beside its special tokens and the prompt); pass at most that",
            param="chunking",
        )
    overlap = chunking.overlap or 0
    _check_overlap(overlap, size)
    if words is None:
        windows = tuple(windows_over(count, size, overlap))
    else:
        windows = tuple(word_windows(words, size, overlap))
    spans = tuple(Span(window, _chars(offsets, window)) for window in windows)
    return ChunkPlan(windows, spans, first_row)


def _late_plan(
    count: int, offsets: Sequence[Range] | None, room: int, chunking: Chunking, first_row: int
) -> ChunkPlan:
    overlap = room // 4 if chunking.overlap is None else chunking.overlap
    _check_overlap(overlap, room)
    windows = tuple(windows_over(count, room, overlap))
    if chunking.spans is not None:
        if offsets is None:
            raise InvalidRequestError(
                "chunking.spans are character ranges of a text; token-id inputs take chunking.size",
                param="chunking",
            )
        spans = tuple(Span(_tokens_of(offsets, chars), chars) for chars in chunking.spans)
    elif chunking.size is not None:
        spans = tuple(
            Span(window, _chars(offsets, window))
            for window in windows_over(count, chunking.size, 0)
        )
    else:
        raise InvalidRequestError(
            "late chunking needs chunking.spans (character ranges) or chunking.size (tokens "
            'per span); for example {"method": "late", "size": 128}',
            param="chunking",
        )
    return ChunkPlan(windows, spans, first_row, late=True)


def _check_overlap(overlap: int, size: int) -> None:
    if not 0 <= overlap < size:
        raise InvalidRequestError(
            f"chunking.overlap must be at least 0 and less than a chunk's {size} tokens, got "
            f"{overlap}",
            param="chunking",
        )


def _chars(offsets: Sequence[Range] | None, tokens: Range) -> Range | None:
    if offsets is None:
        return None
    return (offsets[tokens[0]][0], offsets[tokens[1] - 1][1])


def _tokens_of(offsets: Sequence[Range], chars: Range) -> Range:
    """The tokens a character range touches."""
    start, end = chars
    touched = [i for i, (a, b) in enumerate(offsets) if a < end and b > start]
    if not 0 <= start < end or not touched:
        raise InvalidRequestError(
            f"chunking.spans has [{start}, {end}], which holds no token of its text; each span "
            "is [start, end) in characters, start < end, within the text",
            param="chunking",
        )
    return (touched[0], touched[-1] + 1)


def combine(plan: ChunkPlan, outputs: np.ndarray | list[np.ndarray]) -> np.ndarray:
    """The input's vector from its chunks' pooled vectors: their mean, weighted by their own
    tokens (split), or the mean of every token vector (late)."""
    if plan.late:
        mean: np.ndarray = token_vectors(plan, _parts(outputs)).mean(axis=0)
        return mean
    parts = _parts(outputs)
    if len(parts) == 1:
        return parts[0]
    weights = np.array([end - start for start, end in plan.windows], dtype=np.float64)
    mean = (np.stack(parts).astype(np.float64) * weights[:, None]).sum(axis=0) / weights.sum()
    combined: np.ndarray = mean.astype(np.float32)
    return combined


def chunk_vectors(plan: ChunkPlan, outputs: np.ndarray | list[np.ndarray]) -> np.ndarray:
    """One pooled vector per chunk (split) or span (late), [spans, dim]."""
    parts = _parts(outputs)
    if not plan.late:
        return np.stack(parts)
    tokens = token_vectors(plan, parts)
    return np.stack(
        [tokens[start:end].mean(axis=0) for start, end in (s.tokens for s in plan.spans)]
    )


def token_vectors(plan: ChunkPlan, windows: list[np.ndarray]) -> np.ndarray:
    """Every own token's vector, each from the window where it sits farthest from an edge."""
    ranges = plan.windows
    count = ranges[-1][1]
    tokens = np.empty((count, windows[0].shape[-1]), dtype=np.float32)
    for index, ((start, end), rows) in enumerate(zip(ranges, windows, strict=True)):
        low = start if index == 0 else (start + ranges[index - 1][1]) // 2
        high = end if index == len(ranges) - 1 else (ranges[index + 1][0] + end) // 2
        first = plan.first_row + low - start
        tokens[low:high] = rows[first : first + high - low]
    return tokens


def _parts(outputs: np.ndarray | list[np.ndarray]) -> list[np.ndarray]:
    return outputs if isinstance(outputs, list) else [outputs]
