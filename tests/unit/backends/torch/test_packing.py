"""Which models run packed batches: the check on the loaded model accepts a packing that gives
each sequence its outputs alone and catches one that does not (positions off, a causal mask on
an encoder); models whose attention a packed mask would change are refused before the check."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from poolserve.backends.torch.loader import enable_packing, load_module
from poolserve.backends.torch.module import PoolingModule
from poolserve.backends.torch.packing import (
    Packing,
    packing_of,
    required_similarity,
    similarity_packed_to_alone,
    why_not_packable,
)
from poolserve.config import ModelConfig
from poolserve.models.describe import prepare_model
from tests.tiny_models import make_cross_encoder


@pytest.fixture(scope="module")
def minilm() -> PoolingModule:
    return load_module(prepare_model(ModelConfig(dtype="float32")))


def similarity(module: PoolingModule, packing: Packing) -> float:
    return similarity_packed_to_alone(
        module.backbone, packing, module.vocab_size, torch.device("cpu")
    )


def test_a_bert_encoder_packs_and_a_wrong_packing_is_caught(minilm: PoolingModule) -> None:
    packing = packing_of(minilm.backbone)
    assert packing == Packing(position_offset=0, causal=False, additive=False)
    assert similarity(minilm, packing) >= required_similarity("float32")
    # Positions counted from 2 (RoBERTa's convention) or a causal mask change the outputs.
    assert similarity(minilm, replace(packing, position_offset=2)) < 0.99
    assert similarity(minilm, replace(packing, causal=True)) < 0.99
    # Eager attention adds the mask to its scores: the same outputs.
    assert similarity(minilm, replace(packing, additive=True)) >= 0.99999


def test_enable_packing_sets_the_checked_packing() -> None:
    spec = prepare_model(ModelConfig(dtype="float32"))
    module = load_module(spec)
    assert enable_packing(module, spec) is None
    assert module.packing == Packing()
    assert module.packs("embed") and module.packs("token_embed")


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"sliding_window": 64}, "sliding-window"),
        ({"layer_types": ["full_attention", "sliding_attention"]}, "sliding-window"),
        ({"local_attention": 128}, "local attention"),
        ({"_attn_implementation": "flash_attention_2"}, "takes no attention mask"),
    ],
)
def test_attention_a_packed_mask_would_change_is_refused(
    minilm: PoolingModule, change: dict[str, Any], reason: str
) -> None:
    config = minilm.backbone.config
    saved = {key: getattr(config, key, None) for key in change}
    try:
        for key, value in change.items():
            setattr(config, key, value)
        why = why_not_packable(minilm.backbone, 256, own_code=False)
    finally:
        for key, value in saved.items():
            setattr(config, key, value)
    assert why is not None and reason in why


def test_own_modeling_code_and_sequence_classifiers_are_not_packed(
    minilm: PoolingModule, tmp_path: Path
) -> None:
    assert why_not_packable(minilm.backbone, 256, own_code=True) == "it runs its own modeling code"
    spec = prepare_model(
        ModelConfig(model=str(make_cross_encoder(tmp_path / "ce")), dtype="float32")
    )
    module = load_module(spec)
    assert "classifier head" in str(enable_packing(module, spec))
    assert module.packing is None and not module.packs("classify")
