"""Pooling token embeddings into one vector per sequence (right-padded batches).

Accumulates in float32 whatever the model's dtype, so bf16 models lose no precision here.
"""

from __future__ import annotations

import torch


def pool(hidden: torch.Tensor, mask: torch.Tensor, modes: tuple[str, ...]) -> torch.Tensor:
    """Pool `hidden` [batch, seq, dim] under `mask` [batch, seq]; modes are concatenated."""
    hidden = hidden.float()
    weights = mask.unsqueeze(-1).to(hidden.dtype)
    lengths = weights.sum(dim=1).clamp(min=1.0)
    outputs: list[torch.Tensor] = []
    for mode in modes:
        if mode == "cls":
            outputs.append(hidden[:, 0])
        elif mode == "max":
            outputs.append(hidden.masked_fill(weights == 0, float("-inf")).max(dim=1).values)
        elif mode == "mean":
            outputs.append((hidden * weights).sum(dim=1) / lengths)
        elif mode == "mean_sqrt_len_tokens":
            outputs.append((hidden * weights).sum(dim=1) / lengths.sqrt())
        elif mode == "weightedmean":
            positions = torch.arange(
                1, hidden.shape[1] + 1, device=hidden.device, dtype=hidden.dtype
            )
            position_weights = weights * positions.view(1, -1, 1)
            total = position_weights.sum(dim=1).clamp(min=1e-9)
            outputs.append((hidden * position_weights).sum(dim=1) / total)
        elif mode == "lasttoken":
            # The last position the mask keeps (a mask may also drop leading prompt tokens).
            last = mask.shape[1] - 1 - mask.flip(dims=(1,)).argmax(dim=1)
            outputs.append(hidden[torch.arange(hidden.shape[0], device=hidden.device), last])
        else:
            raise ValueError(f"unknown pooling mode {mode!r}")
    return outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=-1)
