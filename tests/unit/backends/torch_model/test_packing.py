"""Which models run packed batches: the check on the loaded model accepts a packing that gives
each sequence its outputs alone and catches one that does not (positions off, a causal mask on
an encoder); models whose attention a packed mask would change are refused before the check.
Sliding-window models (ModernBERT, EmbeddingGemma) pack with each layer type's window read off
the model, and give sequences longer than the window their padded outputs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from poolserve.backends.torch_model.attention_windows import Window, window_of
from poolserve.backends.torch_model.loader import enable_packing, load_module
from poolserve.backends.torch_model.module import PoolingModule
from poolserve.backends.torch_model.packing import (
    Packing,
    packing_of,
    required_similarity,
    similarity_packed_to_alone,
    why_not_packable,
)
from poolserve.config import ModelConfig
from poolserve.engine.collate import collate, text_item
from poolserve.engine.work import RequestGroup
from poolserve.models.describe import prepare_model
from tests.model_zoo import make_embeddinggemma_300m, make_gte_modernbert_base
from tests.tiny_models import make_cross_encoder


@pytest.fixture(scope="module")
def minilm() -> PoolingModule:
    return load_module(prepare_model(ModelConfig(dtype="float32")))


def similarity(module: PoolingModule, packing: Packing) -> float:
    return similarity_packed_to_alone(
        module.backbone, packing, module.vocab_size, torch.device("cpu")
    )


def test_a_bert_encoder_packs_and_a_wrong_packing_is_caught(minilm: PoolingModule) -> None:
    packing = packing_of(minilm.backbone, 256)
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
        ({"local_attention": 128}, "sliding-window"),
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


def test_own_modeling_code_is_not_packed_and_a_cross_encoder_is(
    minilm: PoolingModule, tmp_path: Path
) -> None:
    assert why_not_packable(minilm.backbone, 256, own_code=True) == "it runs its own modeling code"
    # A cross-encoder packs with its head applied per pair (test_sequence_head.py).
    spec = prepare_model(
        ModelConfig(model=str(make_cross_encoder(tmp_path / "ce")), dtype="float32")
    )
    module = load_module(spec)
    assert enable_packing(module, spec) is None
    assert module.packing == Packing() and module.packs("classify")


@pytest.mark.parametrize("make", [make_gte_modernbert_base, make_embeddinggemma_300m])
def test_sliding_window_models_pack_within_their_windows(
    make: Callable[[Path], Path], tmp_path: Path
) -> None:
    spec = prepare_model(ModelConfig(model=str(make(tmp_path / "model")), dtype="float32"))
    module = load_module(spec)
    assert enable_packing(module, spec) is None and module.packing is not None
    windows = dict(module.packing.layer_windows)
    # The zoo's copies have windows of 16 positions (128 and 512 in the real ones).
    assert windows["full_attention"] is None
    assert windows["sliding_attention"] == Window(before=8, after=8)
    rng = np.random.default_rng(0)
    group = RequestGroup(9)
    lengths = [3, 10, 17, 20, 33, 40, 50, 8, 64]  # most longer than the window
    items = [
        text_item(group, index, [int(token) for token in rng.integers(5, 200, size=length)])
        for index, length in enumerate(lengths)
    ]
    padded = collate(items, pad_token_id=spec.pad_token_id)
    packed = collate(items, True, pad_token_id=spec.pad_token_id, max_row_length=128)
    assert packed.packed is not None

    def outputs(packing: Packing) -> np.ndarray:
        module.packing = packing
        arrays = (packed.input_ids, *packed.packed.arrays())  # type: ignore[union-attr]
        with torch.inference_mode():
            return module.forward_packed("embed", *map(torch.from_numpy, arrays)).numpy()

    with torch.inference_mode():
        expected = module(
            "embed", torch.from_numpy(padded.input_ids), torch.from_numpy(padded.attention_mask)
        ).numpy()
    np.testing.assert_allclose(outputs(module.packing), expected, atol=1e-5)
    # Without the windows, every layer would see the whole sequence: other outputs.
    assert np.abs(outputs(replace(module.packing, layer_windows=())) - expected).max() > 1e-2


def test_a_mask_that_is_not_a_window_is_refused() -> None:
    positions = torch.arange(6)
    offsets = positions.unsqueeze(0) - positions.unsqueeze(1)
    assert window_of(Window(2, 0).allows(offsets), 6, "sliding") == Window(2, 0)
    assert window_of(torch.ones(1, 1, 6, 6, dtype=torch.bool), 6, "full") is None
    strided = offsets % 2 == 0  # every other token: no window of offsets gives it
    with pytest.raises(ValueError, match="not a window of positions"):
        window_of(strided, 6, "strided")
