"""The torch side of a pooling model: a transformers backbone and the heads on top of it.

`PoolingModule(head, ...)` returns float32 tensors: `[batch, dim]` for sequence heads
(embed, classify, sparse) and `[batch, tokens, dim]` for token heads (token_embed,
token_classify). Normalization and activations are left to post-processing, where each request
says what it wants.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from poolserve.models.kinds import Head, Kind
from poolserve.models.pooling import pool

TOKEN_HEADS: frozenset[Head] = frozenset({"token_embed", "token_classify"})


class PoolingModule(torch.nn.Module):
    def __init__(
        self,
        kind: Kind,
        backbone: torch.nn.Module,
        *,
        pooling_modes: tuple[str, ...],
        dense: Sequence[torch.nn.Module] = (),
        splade_strategy: str = "max",
        splade_activation: str = "relu",
    ) -> None:
        super().__init__()
        self.kind = kind
        self.backbone = backbone
        self.pooling_modes = pooling_modes
        self.dense = torch.nn.Sequential(*dense)
        self.splade_strategy = splade_strategy
        self.splade_activation = splade_activation

    def forward(
        self,
        head: Head,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        pool_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The head's output; `pool_mask` (default: the attention mask) says which tokens the
        pooling averages (a prompt left out, for include_prompt: false)."""
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None:
            inputs["token_type_ids"] = token_type_ids
        output = self.backbone(**inputs)
        if head in ("classify", "token_classify"):
            return output.logits.float()  # type: ignore[no-any-return]
        if head == "sparse":
            return splade_pool(
                output.logits, attention_mask, self.splade_strategy, self.splade_activation
            )
        hidden = output.last_hidden_state
        if head == "token_embed":
            return self.dense(hidden.float())  # type: ignore[no-any-return]
        pooled = pool(
            hidden, attention_mask if pool_mask is None else pool_mask, self.pooling_modes
        )
        return self.dense(pooled).float()  # type: ignore[no-any-return]


def splade_pool(
    logits: torch.Tensor,
    attention_mask: torch.Tensor,
    strategy: str = "max",
    activation: str = "relu",
) -> torch.Tensor:
    """SPLADE: log(1 + relu(logits)) per token (twice log1p for "log1p_relu", as OpenSearch's
    models), then max (or sum) over the sequence's tokens, padding excluded."""
    weights = torch.log1p(torch.relu(logits.float()))
    if activation == "log1p_relu":
        weights = torch.log1p(weights)
    weights = weights * attention_mask.unsqueeze(-1).to(weights.dtype)
    return weights.sum(dim=1) if strategy == "sum" else weights.max(dim=1).values
