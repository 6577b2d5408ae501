"""Collating work items of tokenized text into the arrays of one forward pass: padded, or packed.

The batch is numpy arrays (the backend seam carries no torch types): a backend makes its own
tensors of them (the torch backend without a copy, backends/torch_model/executor.py).

Padded: one row per item, padded to the longest. Packed (for a model whose backbone takes it,
backends/torch_model/packing.py): the items laid end to end in rows of one length, longest first,
each into the first row with room; the row length is the one, among the longest item's (several
rows: rounded up to a step of `ROW_LENGTH_STEP`) and a few round lengths above it, that costs least:
rows × length for the linear layers, plus the attention's share, which grows with the length (about
length ÷ 6 hidden sizes of a token's work). Measured on real prose (all-MiniLM-L6-v2, bf16, one
thread, 64 sentences of 5-45 tokens): one padded batch 315 ms, length buckets 147 ms, packed rows of
64 tokens 97 ms (97.9 % real tokens), of the longest item's length 112 ms.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np

from poolserve.engine.work import RequestGroup, WorkItem
from poolserve.inputs.tokenizer import TokenizedText
from poolserve.models.kinds import Head


@dataclass(frozen=True)
class Batch:
    """Right-padded int64 arrays for a batch of items."""

    items: list[WorkItem]
    head: Head
    input_ids: np.ndarray
    attention_mask: np.ndarray
    token_type_ids: np.ndarray | None
    # The attention mask without the tokens items leave out of pooling; None: the same.
    pool_mask: np.ndarray | None = None

    # Set for a packed batch (`attention_mask` then marks real tokens, not what attends to what).
    packed: PackedRows | None = None
    # Set for a batch of images (float32 [items, 3, size, size]; no token arrays then).
    pixel_values: np.ndarray | None = None
    # Set for a flat batch (`collate_flat`): each item's token count; `input_ids` then holds
    # the items' tokens end to end, with no padding and no mask.
    lengths: np.ndarray | None = None

    @property
    def padded_tokens(self) -> int:
        if self.pixel_values is not None:
            return sum(item.cost for item in self.items)
        return int(self.input_ids.size)

    @property
    def held_bytes(self) -> int:
        """The bytes its items hold beyond their tokens (images' pixels and outputs)."""
        return sum(item.payload.held_bytes for item in self.items)


@dataclass(frozen=True)
class PackedRows:
    """Where each item sits in a packed batch, and what the model needs to keep them apart.

    Per token: its position in its own sequence, its segment (the item's index in the batch;
    -1: padding) and its pooling weight (0 for padding and for tokens left out of pooling).
    Per item: the flat index (row × length + offset) of its first token and of its last."""

    positions: np.ndarray
    segments: np.ndarray
    pool_weights: np.ndarray
    first: np.ndarray
    last: np.ndarray
    places: tuple[tuple[int, int], ...]  # (row, offset) of each item

    def arrays(self) -> tuple[np.ndarray, ...]:
        """In the order a packed forward takes them, after the input ids."""
        return (self.positions, self.segments, self.pool_weights, self.first, self.last)


# Row lengths tried above the longest item's.
ROUND_ROW_LENGTHS = (64, 128, 256)
# The length of the rows of a batch of several rows is a multiple of this (or the model's
# limit). The linear layers' kernels are made for each token count they see: oneDNN generates
# the code of a count not seen before when first run, and rows × a length that can be anything
# made a new count of almost every batch. Measured on an Intel Xeon with AMX (all-MiniLM-L6-v2,
# bf16, real prose): 3-4 % of the server's CPU went to generating code; with steps of 16,
# c=8 × 32-sentence requests ran 1.13-1.14x and c=64 one-sentence requests 1.22-1.33x, one
# sentence alone as fast (docs/benchmarks.md).
ROW_LENGTH_STEP = 16


def first_fit_rows(lengths: Sequence[int], row_length: int) -> list[list[int]]:
    """Item indices per row: longest first, each into the first row it fits in."""
    rows: list[list[int]] = []
    room: list[int] = []
    for index in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        length = lengths[index]
        for row, free in enumerate(room):
            if free >= length:
                rows[row].append(index)
                room[row] = free - length
                break
        else:
            rows.append([index])
            room.append(row_length - length)
    return rows


def packed_layout(
    lengths: Sequence[int], hidden_size: int, max_row_length: int
) -> tuple[int, list[list[int]]]:
    """The cheapest row length for these items (see the module's docstring) and its rows."""
    longest = max(lengths)
    stepped = -(-longest // ROW_LENGTH_STEP) * ROW_LENGTH_STEP
    if stepped > max_row_length:  # no step fits under the limit (an item may exceed it)
        stepped = max(longest, max_row_length)
    rounds = (n for n in ROUND_ROW_LENGTHS if longest < n <= max_row_length)
    best: tuple[float, int, list[list[int]]] | None = None
    for row_length in sorted({longest, stepped, *rounds}):
        rows = first_fit_rows(lengths, row_length)
        if len(rows) > 1 and row_length == longest != stepped:
            continue  # several rows: the longest's length rounded up to a step instead
        cost = len(rows) * row_length * (1.0 + row_length / (6.0 * max(1, hidden_size)))
        if best is None or cost < best[0]:
            best = (cost, row_length, rows)
    assert best is not None
    return best[1], best[2]


def collate(
    items: list[WorkItem],
    packed: bool = False,
    *,
    pad_token_id: int,
    hidden_size: int = 768,
    max_row_length: int = 512,
) -> Batch:
    """A packed batch where asked for and every item attends to all its tokens, else a padded
    one (token ids padded to the longest; the mask marks real tokens). The items' payloads
    are `TokenizedText`, or (head `image_embed`) prepared images, stacked."""
    if items[0].head == "image_embed":
        return _images(items)
    texts: list[TokenizedText] = [item.payload for item in items]
    if packed and all(text.attention_mask is None for text in texts):
        return _pack(items, texts, pad_token_id, hidden_size, max_row_length)
    longest = max(len(text.input_ids) for text in texts)
    input_ids = np.full((len(items), longest), pad_token_id, dtype=np.int64)
    attention_mask = np.zeros((len(items), longest), dtype=np.int64)
    with_types = any(text.token_type_ids is not None for text in texts)
    token_type_ids = np.zeros((len(items), longest), dtype=np.int64) if with_types else None
    for row, text in enumerate(texts):
        length = len(text.input_ids)
        input_ids[row, :length] = text.input_ids
        attention_mask[row, :length] = 1 if text.attention_mask is None else text.attention_mask
        if token_type_ids is not None and text.token_type_ids is not None:
            token_type_ids[row, :length] = text.token_type_ids

    pool_mask = None
    if any(text.pool_from for text in texts):
        pool_mask = attention_mask.copy()
        for row, text in enumerate(texts):
            pool_mask[row, : text.pool_from] = 0
    return Batch(items, items[0].head, input_ids, attention_mask, token_type_ids, pool_mask)


def collate_flat(items: list[WorkItem], packed: bool = False) -> Batch:
    """The items' tokens end to end in one int64 array, and each one's count: the batch of a
    runtime that looks tokens up one by one (a static model's table) and needs no rows."""
    texts: list[TokenizedText] = [item.payload for item in items]
    lengths = np.fromiter((len(text.input_ids) for text in texts), np.int64, len(texts))
    total = int(lengths.sum())
    ids = np.fromiter(chain.from_iterable(text.input_ids for text in texts), np.int64, total)
    return Batch(items, items[0].head, ids, _NO_MASK, None, lengths=lengths)


# A flat batch's mask: its tokens are all real.
_NO_MASK = np.zeros(0, dtype=np.int64)


def _images(items: list[WorkItem]) -> Batch:
    no_tokens = np.zeros((len(items), 0), dtype=np.int64)
    pixels = np.stack([item.payload.pixel_values for item in items])
    return Batch(items, "image_embed", no_tokens, no_tokens, None, pixel_values=pixels)


def _pack(
    items: list[WorkItem],
    texts: list[TokenizedText],
    pad_token_id: int,
    hidden_size: int,
    max_row_length: int,
) -> Batch:
    lengths = [len(text.input_ids) for text in texts]
    row_length, rows = packed_layout(lengths, hidden_size, max_row_length)
    shape = (len(rows), row_length)
    input_ids = np.full(shape, pad_token_id, dtype=np.int64)
    positions = np.zeros(shape, dtype=np.int64)
    segments = np.full(shape, -1, dtype=np.int64)
    pool_weights = np.zeros(shape, dtype=np.int64)
    with_types = any(text.token_type_ids is not None for text in texts)
    token_type_ids = np.zeros(shape, dtype=np.int64) if with_types else None
    first = np.zeros(len(items), dtype=np.int64)
    last = np.zeros(len(items), dtype=np.int64)
    places: list[tuple[int, int]] = [(0, 0)] * len(items)
    for row, members in enumerate(rows):
        offset = 0
        for index in members:
            text = texts[index]
            end = offset + lengths[index]
            input_ids[row, offset:end] = text.input_ids
            positions[row, offset:end] = np.arange(lengths[index])
            segments[row, offset:end] = index
            pool_weights[row, offset + text.pool_from : end] = 1
            if token_type_ids is not None and text.token_type_ids is not None:
                token_type_ids[row, offset:end] = text.token_type_ids
            first[index] = row * row_length + offset
            last[index] = row * row_length + end - 1
            places[index] = (row, offset)
            offset = end
    return Batch(
        items=items,
        head=items[0].head,
        input_ids=input_ids,
        attention_mask=(segments >= 0).astype(np.int64),
        token_type_ids=token_type_ids,
        packed=PackedRows(positions, segments, pool_weights, first, last, tuple(places)),
    )


def text_item(
    group: RequestGroup,
    index: int,
    input_ids: list[int],
    token_type_ids: list[int] | None = None,
    head: Head = "embed",
    attention_mask: list[int] | None = None,
    pool_from: int = 0,
) -> WorkItem:
    """A work item of tokenized text (warm-up batches, benchmarks and tests build them)."""
    text = TokenizedText(input_ids, token_type_ids, head, attention_mask, pool_from)
    return WorkItem.of(group, index, text)
