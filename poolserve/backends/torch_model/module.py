"""The torch side of a pooling model: a transformers backbone and the heads on top of it.

`PoolingModule(head, ...)` returns float32 tensors: `[batch, dim]` for sequence heads
(embed, classify, sparse) and `[batch, tokens, dim]` for token heads (token_embed,
token_classify, m3). Normalization and activations are left to post-processing, where each
request says what it wants.

Two heads sit on other backbones than transformers' own heads: an LLM reranker's score is read
from the next-token logits of two vocabulary entries at the last position (`NextTokenScorer`,
without computing the logits of the whole vocabulary), and BGE-M3's lexical and multi-vector
outputs come from its two extra linear layers (`M3Heads`).

`forward_packed` is the same over a packed batch (several inputs to a row,
backends/torch_model/packing.py), for a backbone whose packing was checked at load.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch

from poolserve.backends.torch_model.invariant_kernels import BatchInvariantMode, each_alone
from poolserve.backends.torch_model.packing import Packing
from poolserve.backends.torch_model.sequence_head import SequenceHead, base_model
from poolserve.backends.torch_model.token_pooling import pool, pool_segments, segment_sum
from poolserve.models.kinds import Head, Kind

TOKEN_HEADS: frozenset[Head] = frozenset({"token_embed", "token_classify", "m3"})


class NextTokenScorer(torch.nn.Module):
    """The logit of "yes" (minus that of "no", where the template has one) as the next token
    after the last real position: rows of the LM head's weight, applied to one hidden state."""

    rows: torch.Tensor

    def __init__(self, rows: torch.Tensor, softcap: float | None) -> None:
        super().__init__()
        self.register_buffer("rows", rows)
        self.softcap = softcap

    @classmethod
    def of_causal_lm(cls, model: Any, token_ids: Sequence[int]) -> NextTokenScorer:
        """The rows of `model`'s LM head for `token_ids` (and its logit soft-capping)."""
        head = model.get_output_embeddings()
        if getattr(head, "bias", None) is not None:
            raise ValueError("an LM head with a bias is not supported for reranking")
        rows = head.weight[list(token_ids)].detach().clone()
        softcap = getattr(model.config.get_text_config(), "final_logit_softcapping", None)
        return cls(rows, float(softcap) if softcap else None)

    def score(self, last_hidden: torch.Tensor) -> torch.Tensor:
        """[batch, 1] float32 logits from the hidden states at each sequence's last token."""
        logits = last_hidden.float() @ self.rows.float().T
        if self.softcap is not None:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        if logits.shape[1] == 2:
            logits = logits[:, :1] - logits[:, 1:]
        return logits


class M3Heads(torch.nn.Module):
    """BGE-M3's `sparse_linear` (one weight per token) and `colbert_linear` (a vector per
    token), over the encoder's last hidden states, as FlagEmbedding computes them."""

    special_ids: torch.Tensor

    def __init__(
        self, sparse: torch.nn.Linear, colbert: torch.nn.Linear, special_ids: Sequence[int]
    ) -> None:
        super().__init__()
        self.sparse = sparse
        self.colbert = colbert
        self.register_buffer("special_ids", torch.tensor(list(special_ids), dtype=torch.long))

    def token_weights(self, hidden: torch.Tensor) -> torch.Tensor:
        """relu(sparse_linear(h)) per token: [batch, tokens]."""
        weights: torch.Tensor = torch.relu(self.sparse(hidden.float())).squeeze(-1)
        return weights

    def vectors(self, hidden: torch.Tensor) -> torch.Tensor:
        """colbert_linear(h) per token: [batch, tokens, dim]."""
        vectors: torch.Tensor = self.colbert(hidden.float())
        return vectors

    def lexical(
        self, hidden: torch.Tensor, input_ids: torch.Tensor, mask: torch.Tensor, vocab: int
    ) -> torch.Tensor:
        """Each token id's largest weight in the sequence, special tokens left out:
        [batch, vocab]."""
        weights = self.token_weights(hidden) * mask.to(torch.float32)
        out = torch.zeros(hidden.shape[0], vocab, dtype=torch.float32, device=hidden.device)
        out.scatter_reduce_(1, input_ids, weights, reduce="amax", include_self=True)
        out[:, self.special_ids] = 0.0
        return out

    def combined(self, hidden: torch.Tensor) -> torch.Tensor:
        """Per token: its ColBERT vector and its lexical weight; row 0 holds the [CLS] hidden
        state (the dense vector) instead of a ColBERT vector: [batch, tokens, hidden + 1]."""
        hidden = hidden.float()
        vectors = self.vectors(hidden)
        vectors[:, 0] = hidden[:, 0]
        return torch.cat([vectors, self.token_weights(hidden).unsqueeze(-1)], dim=-1)

    def lexical_packed(
        self,
        hidden: torch.Tensor,
        input_ids: torch.Tensor,
        segments: torch.Tensor,
        count: int,
        vocab: int,
    ) -> torch.Tensor:
        """`lexical` of each segment of a packed batch: [segments, vocab]."""
        weights = (self.token_weights(hidden) * (segments >= 0).to(torch.float32)).reshape(-1)
        flat = segments.reshape(-1).clamp(min=0) * vocab + input_ids.reshape(-1)
        out = hidden.new_zeros(count * vocab, dtype=torch.float32)
        out = out.scatter_reduce(0, flat, weights, reduce="amax", include_self=True)
        out = out.reshape(count, vocab)
        out[:, self.special_ids] = 0.0
        return out

    def combined_packed(self, hidden: torch.Tensor, first: torch.Tensor) -> torch.Tensor:
        """`combined` over a packed batch: each segment's first token holds its [CLS] state."""
        hidden = hidden.float()
        vectors = self.vectors(hidden)
        flat = vectors.reshape(-1, vectors.shape[-1])
        flat[first] = hidden.reshape(-1, hidden.shape[-1])[first]
        return torch.cat([vectors, self.token_weights(hidden).unsqueeze(-1)], dim=-1)


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
        next_token: NextTokenScorer | None = None,
        m3: M3Heads | None = None,
    ) -> None:
        super().__init__()
        self.kind = kind
        self.backbone = backbone
        self.pooling_modes = pooling_modes
        self.dense = torch.nn.Sequential(*dense)
        self.splade_strategy = splade_strategy
        self.splade_activation = splade_activation
        self.next_token = next_token
        self.m3 = m3
        # DistilBERT, T5 encoders and decoders take no token type ids (a pair's types are
        # dropped: their tokenizers mark the pair with separators alone).
        self.takes_token_types = "token_type_ids" in inspect.signature(backbone.forward).parameters
        config: Any = getattr(backbone, "config", None)
        text_config = config.get_text_config() if config is not None else None
        self.vocab_size = int(getattr(text_config, "vocab_size", 0) or 0)
        # How the backbone reads packed batches, once checked (backends/torch_model/packing.py);
        # None: it runs padded batches only.
        self.packing: Packing | None = None
        # A sequence classifier's head taken apart (sequence_head.py), once checked: its packed
        # batches run the base model, then the head on the position it reads of each segment.
        self.sequence_head: SequenceHead | None = None
        # Whether its padded forward is batch-invariant (batch_invariant.py).
        self.batch_invariant = False

    def packs(self, head: Head) -> bool:
        """Whether `head` runs packed batches: every head of a packable backbone, a sequence
        classifier's where its head was taken apart (it reads one position of each row)."""
        if self.packing is None or head != "classify":
            return self.packing is not None
        return self.next_token is not None or self.sequence_head is not None

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
        if not self.batch_invariant:
            return self._forward(head, input_ids, attention_mask, token_type_ids, pool_mask)
        with BatchInvariantMode():
            return self._forward(head, input_ids, attention_mask, token_type_ids, pool_mask)

    def _pool(
        self, pooling: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], *arguments: Any
    ) -> torch.Tensor:
        """`pooling(values, mask)`, each sequence alone where batch-invariant."""
        values, mask, attention_mask = arguments
        if self.batch_invariant:
            return each_alone(pooling, values, mask, attention_mask)
        return pooling(values, mask)

    def _forward(
        self,
        head: Head,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None,
        pool_mask: torch.Tensor | None,
    ) -> torch.Tensor:
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None and self.takes_token_types:
            inputs["token_type_ids"] = token_type_ids
        output = self.backbone(**inputs)
        if self.next_token is not None:
            last = pool(output.last_hidden_state, attention_mask, ("lasttoken",))
            return self.next_token.score(last)
        if self.m3 is not None and head in ("sparse", "m3", "token_embed"):
            hidden = output.last_hidden_state
            if head == "sparse":
                return self.m3.lexical(hidden, input_ids, attention_mask, self.vocab_size)
            if head == "m3":
                return self.m3.combined(hidden)
            return self.m3.vectors(hidden)
        if head in ("classify", "token_classify"):
            return output.logits.float()  # type: ignore[no-any-return]
        if head == "sparse":
            strategy, activation = self.splade_strategy, self.splade_activation
            return self._pool(
                lambda logits, mask: splade_pool(logits, mask, strategy, activation),
                output.logits,
                attention_mask,
                attention_mask,
            )
        hidden = output.last_hidden_state
        if head == "token_embed":
            return self.dense(hidden.float())  # type: ignore[no-any-return]
        pooled = self._pool(
            lambda values, mask: pool(values, mask, self.pooling_modes),
            hidden,
            attention_mask if pool_mask is None else pool_mask,
            attention_mask,
        )
        return self.dense(pooled).float()  # type: ignore[no-any-return]

    def forward_packed(
        self,
        head: Head,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        segments: torch.Tensor,
        pool_weights: torch.Tensor,
        first: torch.Tensor,
        last: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """`forward` over a packed batch (engine/collate.py): sequence heads give one row per
        segment, [segments, dim]; token heads one per token, [rows, length, dim]."""
        if self.packing is None or not self.packs(head):
            raise ValueError(f"the {head} head does not run packed batches")
        inputs = {"input_ids": input_ids, **self.packing.inputs(self.backbone, segments, positions)}
        if token_type_ids is not None and self.takes_token_types:
            inputs["token_type_ids"] = token_type_ids
        if head == "classify" and self.sequence_head is not None:
            hidden = base_model(self.backbone)(**inputs).last_hidden_state
            return self.sequence_head(
                hidden, self.sequence_head.positions(input_ids, segments, first, last)
            )
        output = self.backbone(**inputs)
        count = first.shape[0]  # not int(): torch.export keeps it symbolic
        if self.next_token is not None:
            hidden = output.last_hidden_state
            return self.next_token.score(hidden.reshape(-1, hidden.shape[-1])[last])
        if self.m3 is not None and head in ("sparse", "m3", "token_embed"):
            hidden = output.last_hidden_state
            if head == "sparse":
                return self.m3.lexical_packed(hidden, input_ids, segments, count, self.vocab_size)
            if head == "m3":
                return self.m3.combined_packed(hidden, first)
            return self.m3.vectors(hidden)
        if head == "token_classify":
            return output.logits.float()  # type: ignore[no-any-return]
        if head == "sparse":
            return splade_pool_segments(
                output.logits, segments, count, self.splade_strategy, self.splade_activation
            )
        hidden = output.last_hidden_state
        if head == "token_embed":
            return self.dense(hidden.float())  # type: ignore[no-any-return]
        pooled = pool_segments(
            hidden, segments, pool_weights, positions, first, last, self.pooling_modes
        )
        return self.dense(pooled).float()  # type: ignore[no-any-return]


def splade_weights(logits: torch.Tensor, activation: str) -> torch.Tensor:
    weights = torch.log1p(torch.relu(logits.float()))
    return torch.log1p(weights) if activation == "log1p_relu" else weights


def splade_pool_segments(
    logits: torch.Tensor, segments: torch.Tensor, count: int, strategy: str, activation: str
) -> torch.Tensor:
    """`splade_pool` of each segment of a packed batch: [segments, vocab]."""
    weights = splade_weights(logits, activation)
    weights = weights * (segments >= 0).unsqueeze(-1).to(weights.dtype)
    flat = weights.reshape(-1, weights.shape[-1])
    index = segments.reshape(-1).clamp(min=0)
    if strategy == "sum":
        return segment_sum(flat, index, count)
    out = flat.new_zeros(count, flat.shape[1])
    gather = index.unsqueeze(-1).expand(-1, flat.shape[1])
    return out.scatter_reduce(0, gather, flat, reduce="amax", include_self=True)


def splade_pool(
    logits: torch.Tensor,
    attention_mask: torch.Tensor,
    strategy: str = "max",
    activation: str = "relu",
) -> torch.Tensor:
    """SPLADE: log(1 + relu(logits)) per token (twice log1p for "log1p_relu", as OpenSearch's
    models), then max (or sum) over the sequence's tokens, padding excluded."""
    weights = splade_weights(logits, activation)
    weights = weights * attention_mask.unsqueeze(-1).to(weights.dtype)
    return weights.sum(dim=1) if strategy == "sum" else weights.max(dim=1).values
