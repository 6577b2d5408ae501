"""Collating work items into padded tensors for one forward pass."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from poolserve.engine.work import WorkItem
from poolserve.models.kinds import Head


@dataclass(frozen=True)
class Batch:
    """Right-padded tensors for a batch of items, still on the CPU."""

    items: list[WorkItem]
    head: Head
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    token_type_ids: torch.Tensor | None
    # The attention mask without the tokens items leave out of pooling; None: the same.
    pool_mask: torch.Tensor | None = None

    @property
    def padded_tokens(self) -> int:
        return int(self.input_ids.numel())


def collate(items: list[WorkItem], pad_token_id: int, pin_memory: bool = False) -> Batch:
    """Pad the items' token ids to the longest one; the mask marks real tokens."""
    longest = max(item.length for item in items)
    input_ids = np.full((len(items), longest), pad_token_id, dtype=np.int64)
    attention_mask = np.zeros((len(items), longest), dtype=np.int64)
    with_types = any(item.token_type_ids is not None for item in items)
    token_type_ids = np.zeros((len(items), longest), dtype=np.int64) if with_types else None
    for row, item in enumerate(items):
        input_ids[row, : item.length] = item.input_ids
        attention_mask[row, : item.length] = (
            1 if item.attention_mask is None else item.attention_mask
        )
        if token_type_ids is not None and item.token_type_ids is not None:
            token_type_ids[row, : item.length] = item.token_type_ids

    pool_mask = None
    if any(item.pool_from for item in items):
        pool_mask = attention_mask.copy()
        for row, item in enumerate(items):
            pool_mask[row, : item.pool_from] = 0

    def tensor(array: np.ndarray) -> torch.Tensor:
        result = torch.from_numpy(array)
        return result.pin_memory() if pin_memory else result

    return Batch(
        items=items,
        head=items[0].head,
        input_ids=tensor(input_ids),
        attention_mask=tensor(attention_mask),
        token_type_ids=None if token_type_ids is None else tensor(token_type_ids),
        pool_mask=None if pool_mask is None else tensor(pool_mask),
    )
