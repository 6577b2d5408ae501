"""Sliding-window attention read off the model itself, so that packed rows can keep it.

ModernBERT's local layers, Gemma 2 and 3's sliding layers and Qwen2's upper layers let a token
see only the tokens within a window of positions around it (or before it), and each model
family states and rounds its window its own way (ModernBERT `|i - j| <= local_attention // 2`,
EmbeddingGemma a halved `sliding_window`, exclusive; a causal Gemma `i - j < sliding_window`).
Rather than restate those rules, `layer_windows` runs the backbone's own mask code on one
sequence longer than any window and reads, for each attention type, which offsets it lets a
token see; it refuses a mask that is not such a window of offsets. The layers never run: the
capture stops at the first call of the last attention type.

A packed batch then gives each attention type its own mask (packing.py): the tokens of one
segment, within that type's window of positions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Window:
    """The tokens a token attends to, by their position relative to its own: at most `before`
    positions earlier and at most `after` later (None: no bound on that side)."""

    before: int | None
    after: int | None

    def allows(self, offsets: torch.Tensor) -> torch.Tensor:
        """Which key-minus-query offsets (in positions) the window lets a token see."""
        allowed = torch.ones_like(offsets, dtype=torch.bool)
        if self.before is not None:
            allowed = allowed & (offsets >= -self.before)
        if self.after is not None:
            allowed = allowed & (offsets <= self.after)
        return allowed


class _Captured(Exception):
    """Raised by the capture hook once every attention type's mask is in hand."""


def window_size(config: Any) -> int | None:
    """The largest window the config states (in either family's field), or None."""
    sizes = [getattr(config, name, None) for name in ("sliding_window", "local_attention")]
    known = [size for size in sizes if isinstance(size, int) and size > 0]
    return max(known) if known else None


def layer_windows(
    backbone: torch.nn.Module, config: Any, max_model_len: int, device: torch.device
) -> tuple[tuple[str, Window | None], ...]:
    """Each attention type of a backbone whose layers attend differently, with its window
    (None: the whole sequence); () where every layer attends alike. Raises ValueError where a
    type's mask is not a window of positions."""
    types = tuple(dict.fromkeys(getattr(config, "layer_types", None) or ()))
    other = set(types) - {"full_attention", "sliding_attention"}
    if other:  # chunked, linear or convolutional layers: no mask of positions says what they see
        raise ValueError(f"its {', '.join(sorted(other))} layers take no packed mask")
    size = window_size(config)
    if len(types) <= 1 or size is None:
        return ()
    length = min(max_model_len, 2 * size + 3)
    masks = _masks_by_type(backbone, set(types), length, device)
    return tuple((kind, window_of(masks[kind], length, kind)) for kind in types)


def _masks_by_type(
    backbone: torch.nn.Module, types: set[str], length: int, device: torch.device
) -> dict[str, torch.Tensor | None]:
    """The attention mask the backbone hands each attention type for one unpadded sequence."""
    found: dict[str, torch.Tensor | None] = {}

    def grab(module: torch.nn.Module, args: Any, kwargs: dict[str, Any]) -> None:
        kind = getattr(module, "attention_type", None) or getattr(module, "layer_type", None)
        if kind in types and kind not in found and "attention_mask" in kwargs:
            found[kind] = kwargs["attention_mask"]
            if found.keys() >= types:
                raise _Captured

    layers = [
        module
        for module in backbone.modules()
        if isinstance(getattr(module, "attention_type", getattr(module, "layer_type", None)), str)
    ]
    hooks = [layer.register_forward_pre_hook(grab, with_kwargs=True) for layer in layers]
    ids = torch.full((1, length), 5, dtype=torch.long, device=device)
    try:
        with torch.inference_mode():
            backbone(input_ids=ids, attention_mask=torch.ones_like(ids))
    except _Captured:
        pass
    finally:
        for hook in hooks:
            hook.remove()
    missing = types - found.keys()
    if missing:
        raise ValueError(f"its {', '.join(sorted(missing))} layers take no attention mask")
    return found


def window_of(mask: torch.Tensor | dict[str, Any] | None, length: int, kind: str) -> Window | None:
    """The window a mask of one sequence of `length` tokens keeps each token to (None: the
    whole sequence); ValueError where no window of offsets gives exactly that mask."""
    if mask is None:  # the attention sees the whole sequence (sdpa skips an all-true mask)
        return None
    if not isinstance(mask, torch.Tensor) or mask.shape[-2:] != (length, length):
        raise ValueError(f"its {kind} layers take a mask poolserve cannot read")
    square = mask.reshape(-1, length, length)[0]
    allowed = square if square.dtype == torch.bool else square > torch.finfo(square.dtype).min / 2
    positions = torch.arange(length, device=square.device)
    offsets = positions.unsqueeze(0) - positions.unsqueeze(1)  # [query, key]: key - query
    seen = offsets.masked_fill(~allowed, 0)
    before, after = int(-seen.min()), int(seen.max())
    unbounded = length - 1
    window = Window(None if before >= unbounded else before, None if after >= unbounded else after)
    if not torch.equal(allowed, window.allows(offsets)):
        raise ValueError(f"its {kind} layers' mask is not a window of positions")
    return window if window != Window(None, None) else None
