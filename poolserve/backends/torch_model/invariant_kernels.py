"""The kernels of batch-invariant forward passes (batch_invariant.py says why each): linear
layers in fixed blocks of rows, attention and pooling per sequence, and the torch function mode
that runs a forward's linear layers and attention through them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

# Rows of one block of a linear layer's product (measured: 64 keeps the products as fast as
# whole ones on real batches, and wastes at most 63 padding rows).
BLOCK_ROWS = 64


def blocked_linear(
    input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """`F.linear` in blocks of `BLOCK_ROWS` rows (see the module)."""
    rows = input.reshape(-1, input.shape[-1])
    count = rows.shape[0]
    padded = -(-count // BLOCK_ROWS) * BLOCK_ROWS
    if padded != count:
        rows = torch.cat([rows, rows.new_zeros(padded - count, rows.shape[1])])
    out = rows.new_empty(padded, weight.shape[0])
    transposed = weight.t()
    for start in range(0, padded, BLOCK_ROWS):
        block = rows[start : start + BLOCK_ROWS]
        if bias is None:
            torch.mm(block, transposed, out=out[start : start + BLOCK_ROWS])
        else:
            torch.addmm(bias, block, transposed, out=out[start : start + BLOCK_ROWS])
    return out[:count].reshape(*input.shape[:-1], weight.shape[0])


def _full_mask(
    mask: torch.Tensor | None, query: torch.Tensor, key: torch.Tensor, is_causal: bool
) -> torch.Tensor:
    """The attention mask as [batch or 1, heads or 1, L, S]: booleans (True: attend) where it
    is none or only says which keys are kept, else the additive floats (a relative position
    bias, T5's, rides in them)."""
    length, keys = query.shape[-2], key.shape[-2]
    if mask is None:
        kept = torch.ones(length, keys, dtype=torch.bool, device=query.device)
        return (kept.tril() if is_causal else kept).view(1, 1, length, keys)
    while mask.dim() < 4:
        mask = mask.unsqueeze(0)
    return mask.expand(mask.shape[0], mask.shape[1], length, keys)


def _attended(mask: torch.Tensor) -> torch.Tensor:
    """Where a mask lets a query attend a key (an additive mask: above a very negative
    number)."""
    return mask if mask.dtype == torch.bool else mask > torch.finfo(mask.dtype).min / 2


def _own_mask(mask: torch.Tensor) -> torch.Tensor:
    """A sequence's own mask as SDPA gets it: booleans where the floats only keep or drop keys
    (a padding or causal mask, which a sequence alone may get as booleans or none at all), the
    floats where they carry more (a bias)."""
    if mask.dtype == torch.bool:
        return mask
    kept = _attended(mask)
    return kept if bool((mask[kept] == 0).all()) else mask


def per_sequence_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    **options: Any,
) -> torch.Tensor:
    """`F.scaled_dot_product_attention` [batch, heads, L, dim], each sequence over the keys
    some query of it attends to (its own; padding attends to nothing of it), with an explicit
    mask (see the module). Padding positions come out as zeros."""
    full = _full_mask(attn_mask, query, key, is_causal)
    out = query.new_zeros(*query.shape[:-1], value.shape[-1])
    for row in range(query.shape[0]):
        mask = full[row if full.shape[0] > 1 else 0]
        positions = _attended(mask).any(dim=-2).any(dim=0).nonzero().squeeze(-1)
        own = _own_mask(mask[:, positions][:, :, positions]).unsqueeze(0)
        out[row, :, positions] = F.scaled_dot_product_attention(
            query[row : row + 1, :, positions],
            key[row : row + 1, :, positions],
            value[row : row + 1, :, positions],
            attn_mask=own,
            dropout_p=dropout_p,
            scale=scale,
            **options,
        )[0]
    return out


class BatchInvariantMode(TorchFunctionMode):
    """While active (on the runner's thread, around a forward): linear layers in blocks,
    attention per sequence (see the module)."""

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if func is F.linear:
            return blocked_linear(*args, **kwargs)
        if func is F.scaled_dot_product_attention:
            return per_sequence_attention(*args, **kwargs)
        return func(*args, **kwargs)


def each_alone(
    pool: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    values: torch.Tensor,
    masks: torch.Tensor,
    attention_mask: torch.Tensor,
) -> torch.Tensor:
    """`pool(values, masks)` [batch, ...] run on each sequence alone, over its own tokens (those
    its attention mask keeps), so that no reduction runs over another's padding."""
    rows = []
    for row in range(values.shape[0]):
        own = attention_mask[row].nonzero().squeeze(-1)
        rows.append(pool(values[row : row + 1, own], masks[row : row + 1, own]))
    return torch.cat(rows)
