"""Packed batches: several sequences in one row of the batch, attention kept within each.

A batch padded to its longest input spends most of its tokens on padding when inputs vary in
length (real sentences run from 5 to 60 tokens). A packed batch lays the inputs end to end in
rows of one length (first fit, longest first), with each token's position counted from the start
of its own sequence and a block-diagonal attention mask (for a decoder also causal) built from
the tokens' segment numbers, so every sequence sees only itself. The linear layers, most of the
work, then run on real tokens; the attention of a row costs its length squared, so rows are kept
short (engine/collate.py) and only short inputs are packed (engine/scheduler.py).

This rests on the backbone taking a 4D attention mask as it is (transformers' masking utilities
pass one through unchanged) and explicit position ids. A model whose layers attend differently
(full and sliding-window layers: ModernBERT, Gemma) takes one mask per attention type, each
within that type's window (attention_windows.py). `why_not_packable` refuses a model with its
own modeling code, sliding windows on every layer without named attention types, no position
ids, or an attention implementation that takes no mask; `packing_of` reads how the model counts
positions, whether it is causal and its windows; `similarity_packed_to_alone` checks that on the
loaded model: a packed row of two sequences must give each sequence its outputs alone.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch

from poolserve.backends.torch_model.attention_windows import Window, layer_windows, window_size


@dataclass(frozen=True)
class Packing:
    """How a model reads a packed row."""

    # Added to positions counted from 0 (RoBERTa-style embeddings count from padding_idx + 1).
    position_offset: int = 0
    # A decoder: a token attends to the earlier tokens of its sequence only.
    causal: bool = False
    # The attention adds the mask to its scores (eager attention) instead of taking booleans.
    additive: bool = False
    # A backbone whose layers attend differently: each attention type with its window (None:
    # its whole sequence); it then takes one mask per type.
    layer_windows: tuple[tuple[str, Window | None], ...] = ()

    def attention_mask(
        self,
        segments: torch.Tensor,
        positions: torch.Tensor,
        dtype: torch.dtype,
        window: Window | None = None,
    ) -> torch.Tensor:
        """[rows, 1, length, length]: each token attends to the tokens of its own segment, within
        `window` (padding, segment -1, to the padding of its row, so that no row of the mask is
        empty)."""
        allowed = segments.unsqueeze(2) == segments.unsqueeze(1)
        if self.causal:
            allowed = allowed & (positions.unsqueeze(2) >= positions.unsqueeze(1))
        if window is not None:
            allowed = allowed & window.allows(positions.unsqueeze(1) - positions.unsqueeze(2))
        allowed = allowed.unsqueeze(1)
        if not self.additive:
            return allowed
        blocked = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
        return blocked.masked_fill(~allowed, torch.finfo(dtype).min)

    def inputs(
        self, backbone: torch.nn.Module, segments: torch.Tensor, positions: torch.Tensor
    ) -> dict[str, Any]:
        """The backbone's mask (or masks, by attention type) and position ids for a packed
        batch."""
        dtype = _dtype(backbone)
        mask: torch.Tensor | dict[str, torch.Tensor] = (
            {
                kind: self.attention_mask(segments, positions, dtype, window)
                for kind, window in self.layer_windows
            }
            if self.layer_windows
            else self.attention_mask(segments, positions, dtype)
        )
        return {"attention_mask": mask, "position_ids": positions + self.position_offset}


def _dtype(module: torch.nn.Module) -> torch.dtype:
    return next(module.parameters()).dtype


def _config(backbone: torch.nn.Module) -> Any:
    config: Any = getattr(backbone, "config", None)
    return config.get_text_config() if config is not None else None


def why_not_packable(backbone: torch.nn.Module, max_model_len: int, own_code: bool) -> str | None:
    """Why the model cannot run packed batches (before checking it), or None."""
    config = _config(backbone)
    if config is None:
        return "it has no transformers config"
    if own_code:
        return "it runs its own modeling code"
    if "position_ids" not in inspect.signature(backbone.forward).parameters:
        return f"{type(backbone).__name__} takes no position ids"
    attention = getattr(config, "_attn_implementation", None)
    if attention not in ("sdpa", "eager"):
        return f"its {attention} attention takes no attention mask"
    window = window_size(config)
    if not getattr(config, "use_sliding_window", True):
        window = None
    if window and window < max_model_len and len(set(getattr(config, "layer_types", ()))) < 2:
        return "its sliding-window attention names no attention types to give a mask each"
    return None


def packing_of(
    backbone: torch.nn.Module, max_model_len: int, device: torch.device | None = None
) -> Packing:
    """The packing a backbone would take (to be checked with `similarity_packed_to_alone`).
    Raises ValueError where its sliding windows cannot be read (attention_windows.py)."""
    config = _config(backbone)
    base = getattr(backbone, "base_model", backbone)
    padding_idx = getattr(getattr(base, "embeddings", None), "padding_idx", None)
    # A decoder's attention layers say they are causal; a config may turn that off
    # (gte-Qwen2's `"is_causal": false`, which transformers' mask functions honour).
    layers_causal = any(getattr(module, "is_causal", False) is True for module in base.modules())
    return Packing(
        position_offset=padding_idx + 1 if isinstance(padding_idx, int) else 0,
        causal=layers_causal and getattr(config, "is_causal", True) is not False,
        additive=getattr(config, "_attn_implementation", None) == "eager",
        layer_windows=layer_windows(backbone, config, max_model_len, device or torch.device("cpu")),
    )


def _token_outputs(output: Any) -> torch.Tensor:
    logits = getattr(output, "logits", None)
    outputs: torch.Tensor = logits if logits is not None else output.last_hidden_state
    return outputs.float()


@dataclass(frozen=True)
class ProbeRow:
    """Two token sequences alone, and packed into one row followed by padding."""

    sequences: tuple[list[int], list[int]]
    input_ids: torch.Tensor  # [1, length]
    segments: torch.Tensor
    positions: torch.Tensor
    first: torch.Tensor  # per sequence, the flat index of its first token
    last: torch.Tensor

    @classmethod
    def of(cls, vocab_size: int, device: torch.device) -> ProbeRow:
        low = min(100, max(1, vocab_size // 4))
        span = max(1, min(vocab_size - low, 2000))
        first = [low + (7 * index) % span for index in range(7)]
        second = [low + (11 * index + 3) % span for index in range(12)]
        padding = 5
        return cls(
            sequences=(first, second),
            input_ids=torch.tensor([first + second + [low] * padding], device=device),
            segments=torch.tensor(
                [[0] * len(first) + [1] * len(second) + [-1] * padding], device=device
            ),
            positions=torch.tensor(
                [list(range(len(first))) + list(range(len(second))) + [0] * padding],
                device=device,
            ),
            first=torch.tensor([0, len(first)], device=device),
            last=torch.tensor([len(first) - 1, len(first) + len(second) - 1], device=device),
        )

    def alone(self, index: int) -> torch.Tensor:
        return self.input_ids.new_tensor([self.sequences[index]])


def similarity_packed_to_alone(
    backbone: torch.nn.Module, packing: Packing, vocab_size: int, device: torch.device
) -> float:
    """The smallest cosine between a token's outputs in a packed row (two sequences, then
    padding) and in its sequence alone: about 1 where the packing is right, far less where a
    sequence sees the other or its positions are off."""
    probe = ProbeRow.of(vocab_size, device)
    with torch.inference_mode():
        alone = []
        for index in range(2):
            ids = probe.alone(index)
            outputs = backbone(input_ids=ids, attention_mask=torch.ones_like(ids))
            alone.append(_token_outputs(outputs)[0])
        inputs = packing.inputs(backbone, probe.segments, probe.positions)
        packed = _token_outputs(backbone(input_ids=probe.input_ids, **inputs))[0]
    expected = torch.cat(alone)
    got = packed[: expected.shape[0]]
    return float(torch.nn.functional.cosine_similarity(got, expected, dim=-1).min())


def required_similarity(dtype: str) -> float:
    """How close a packed row's outputs must be to its sequences' alone, in `dtype` (a name)."""
    return 0.99999 if dtype == "float32" else 0.999


def required_score_difference(dtype: str) -> float:
    """How close a packed sequence's logits must be to its logits alone, relative to their size,
    in `dtype` (a name)."""
    return 1e-5 if dtype == "float32" else 1e-2
