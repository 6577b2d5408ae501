"""A head's forward as a module of tensors only, with example inputs and their dynamic
dimensions: what `torch.export` traces, for AOTInductor (aot.py) and for ONNX
(backends/graph/onnx_export.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from poolserve.backends.torch_model.forward_cache import ForwardTarget
from poolserve.models.kinds import Head
from poolserve.models.spec import ModelSpec


class _HeadForward(torch.nn.Module):
    """The module's forward for one head, with tensors only (what torch.export traces)."""

    def __init__(self, module: Callable[..., torch.Tensor], head: Head) -> None:
        super().__init__()
        self.module = module
        self.head = head

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return self.module(self.head, input_ids, attention_mask, token_type_ids)


class _MaskedHeadForward(_HeadForward):
    """The module's padded forward for one head, the pooling mask an input of its own."""

    def forward(  # type: ignore[override]
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        pool_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return self.module(self.head, input_ids, attention_mask, token_type_ids, pool_mask)


class _PackedHeadForward(_HeadForward):
    """The module's packed forward for one head, with tensors only."""

    def forward(  # type: ignore[override]
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        segments: torch.Tensor,
        pool_weights: torch.Tensor,
        first: torch.Tensor,
        last: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        forward_packed: Callable[..., torch.Tensor] = self.module.forward_packed  # type: ignore[attr-defined]
        return forward_packed(
            self.head, input_ids, positions, segments, pool_weights, first, last, token_type_ids
        )


def forward_to_export(
    module: torch.nn.Module, spec: ModelSpec, target: ForwardTarget
) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...], tuple[dict[int, Any], ...]]:
    """The forward to export, example inputs and their dynamic dimensions. Its inputs, in
    order: padded, the input ids, attention mask (and pooling mask, `with_pool_mask`); packed,
    the input ids and `PackedRows.arrays()` (engine/collate.py); then, `with_token_types`, the
    token type ids."""
    batch = torch.export.Dim("batch", min=1, max=max(2, target.max_batch_size))
    length = torch.export.Dim("length", min=1, max=max(2, spec.max_model_len))
    example_length = min(16, spec.max_model_len)
    ids = torch.full((2, example_length), 5, dtype=torch.long)
    if not target.packed:
        args: tuple[torch.Tensor, ...] = (ids, torch.ones_like(ids))
        forward = _HeadForward(module, target.head)
        if target.with_pool_mask:
            args += (torch.ones_like(ids),)
            forward = _MaskedHeadForward(module, target.head)
        if target.with_token_types:
            args += (torch.zeros_like(ids),)
        return forward.eval(), args, ({0: batch, 1: length},) * len(args)
    # Two rows: two sequences and one, then padding.
    split, tail = example_length // 2, example_length - 3
    segments = torch.full_like(ids, -1)
    segments[0, :split], segments[0, split:], segments[1, :tail] = 0, 1, 2
    positions = torch.zeros_like(ids)
    positions[0, :split] = torch.arange(split)
    positions[0, split:] = torch.arange(example_length - split)
    positions[1, :tail] = torch.arange(tail)
    first = torch.tensor([0, split, example_length])
    last = torch.tensor([split - 1, example_length - 1, example_length + tail - 1])
    args = (ids, positions, segments, (segments >= 0).long(), first, last)
    if target.with_token_types:
        args += (torch.zeros_like(ids),)
    rows = {0: batch, 1: length}
    items = {0: torch.export.Dim("items", min=1, max=max(3, target.max_batch_size))}
    dims = (rows, rows, rows, rows, items, items) + ((rows,) if target.with_token_types else ())
    return _PackedHeadForward(module, target.head).eval(), args, dims
