"""A sequence classifier's head, applied to the positions it reads: what lets cross-encoders and
text classifiers run packed batches.

transformers' sequence classifiers read one position of each row: an encoder's first token
([CLS], <s>), a decoder's rightmost token that is not padding. In a packed row (packing.py) that
would read the first sequence only, so `SequenceHead.of(model)` takes the head apart instead:
which position it reads and the layers it runs on that position's hidden state, for the heads of
transformers' public classes whose structure it knows: BERT's pooler and classifier; RoBERTa,
XLM-R, ELECTRA and MPNet's classification head; DistilBERT's pre-classifier; DeBERTa's context
pooler; ModernBERT's prediction head where it pools [CLS]; a decoder's score layer. Any other
head gives None, and the model runs padded. The load check (loader.pack_if_checked) compares the
packed logits with the model's own, so a head taken apart wrongly is refused, not served.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch

Reads = Literal["first", "last"]


@dataclass(frozen=True)
class SequenceHead:
    """`logits(states)`: [segments, labels] from each segment's hidden state at the position the
    head reads (`reads`), [segments, hidden]."""

    reads: Reads
    logits: Callable[[torch.Tensor], torch.Tensor]
    # A decoder's head reads the rightmost token that is not this id (transformers' rule).
    pad_token_id: int | None = None

    @classmethod
    def of(cls, model: torch.nn.Module) -> SequenceHead | None:
        """The head of a transformers sequence classifier, or None where it is not known."""
        return _decoder_head(model) or _encoder_head(model)

    def positions(
        self,
        input_ids: torch.Tensor,
        segments: torch.Tensor,
        first: torch.Tensor,
        last: torch.Tensor,
    ) -> torch.Tensor:
        """The flat index, in a packed batch, of the token the head reads for each segment."""
        if self.reads == "first":
            return first
        if self.pad_token_id is None:
            return last
        flat = torch.arange(input_ids.numel(), device=input_ids.device)
        real = (input_ids.reshape(-1) != self.pad_token_id) & (segments.reshape(-1) >= 0)
        candidates = torch.where(real, flat, torch.full_like(flat, -1))
        rightmost = torch.full_like(last, -1).scatter_reduce(
            0, segments.reshape(-1).clamp(min=0), candidates, reduce="amax", include_self=True
        )
        # An input of padding alone: transformers' argmax over no real token reads the first.
        return torch.where(rightmost >= 0, rightmost, first)

    def __call__(self, hidden: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """float32 [segments, labels] from packed hidden states [rows, length, hidden]."""
        states = hidden.reshape(-1, hidden.shape[-1])[positions]
        return self.logits(states).float()


def base_model(model: torch.nn.Module) -> torch.nn.Module:
    """The backbone under a transformers model's head (the model itself where it has none)."""
    base = getattr(model, "base_model", model)
    return base if isinstance(base, torch.nn.Module) else model


def _decoder_head(model: torch.nn.Module) -> SequenceHead | None:
    score = getattr(model, "score", None)
    if not isinstance(score, torch.nn.Linear) or hasattr(model, "classifier"):
        return None
    config: Any = model.config
    pad = config.get_text_config().pad_token_id
    return SequenceHead("last", score, pad if isinstance(pad, int) else None)


def _encoder_head(model: torch.nn.Module) -> SequenceHead | None:
    classifier = getattr(model, "classifier", None)
    if not isinstance(classifier, torch.nn.Module):
        return None
    as_rows = _one_token_rows
    if hasattr(classifier, "out_proj"):
        # RobertaClassificationHead and its kin read features[:, 0] themselves.
        return SequenceHead("first", lambda states: classifier(as_rows(states)))
    if not isinstance(classifier, torch.nn.Linear):
        return None
    head = getattr(model, "head", None)
    if isinstance(head, torch.nn.Module):
        # ModernBERT: its prediction head on the [CLS] state, or on a mean it would need whole.
        if getattr(model.config, "classifier_pooling", None) != "cls":
            return None
        return SequenceHead("first", lambda states: classifier(head(states)))
    pre_classifier = getattr(model, "pre_classifier", None)
    if isinstance(pre_classifier, torch.nn.Linear):  # DistilBERT
        return SequenceHead("first", lambda states: classifier(torch.relu(pre_classifier(states))))
    pooler = getattr(model, "pooler", None) or getattr(base_model(model), "pooler", None)
    # BertPooler and DeBERTa's ContextPooler read hidden_states[:, 0]; ALBERT's pooler is a bare
    # Linear whose activation lives in the model's forward, so it is not taken apart.
    if isinstance(pooler, torch.nn.Module) and not isinstance(pooler, torch.nn.Linear):
        return SequenceHead("first", lambda states: classifier(pooler(as_rows(states))))
    return None


def _one_token_rows(states: torch.Tensor) -> torch.Tensor:
    """[segments, hidden] as rows of one token, [segments, 1, hidden]: what a head that reads
    `hidden_states[:, 0]` takes."""
    return states.unsqueeze(1)
