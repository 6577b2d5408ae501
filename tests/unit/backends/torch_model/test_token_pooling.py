"""Pooling modes against float64 numpy references on right-padded and packed batches.

Padded positions hold large garbage, so a mode that lets padding leak in fails loudly.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from poolserve.backends.torch_model.token_pooling import pool, pool_segments
from poolserve.engine.collate import PackedRows, collate, text_item
from poolserve.engine.work import RequestGroup
from poolserve.models.layout import POOLING_MODES

LENGTHS = [9, 1, 4, 7, 2]
SEQ, DIM = 9, 6


def batch(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    hidden = rng.normal(size=(len(LENGTHS), SEQ, DIM)).astype(np.float32)
    mask = np.zeros((len(LENGTHS), SEQ), dtype=np.int64)
    for row, length in enumerate(LENGTHS):
        mask[row, :length] = 1
        hidden[row, length:] = rng.uniform(-1e3, 1e3, size=(SEQ - length, DIM))
    return hidden, mask


def reference(hidden: np.ndarray, mask: np.ndarray, mode: str) -> np.ndarray:
    """One row at a time, on the real tokens only, in float64."""
    rows = []
    for h, m in zip(hidden.astype(np.float64), mask, strict=True):
        n = int(m.sum())
        real = h[:n]
        if mode == "cls":
            rows.append(real[0])
        elif mode == "max":
            rows.append(real.max(axis=0))
        elif mode == "mean":
            rows.append(real.mean(axis=0))
        elif mode == "mean_sqrt_len_tokens":
            rows.append(real.sum(axis=0) / np.sqrt(n))
        elif mode == "weightedmean":
            weights = np.arange(1, n + 1, dtype=np.float64)[:, None]
            rows.append((real * weights).sum(axis=0) / weights.sum())
        elif mode == "lasttoken":
            rows.append(real[-1])
        else:
            raise AssertionError(mode)
    return np.stack(rows)


def run_pool(hidden: np.ndarray, mask: np.ndarray, modes: tuple[str, ...]) -> np.ndarray:
    return pool(torch.from_numpy(hidden), torch.from_numpy(mask), modes).numpy()


@pytest.mark.parametrize("mode", POOLING_MODES)
def test_each_mode_matches_the_reference(mode: str) -> None:
    hidden, mask = batch()
    actual = run_pool(hidden, mask, (mode,))
    assert actual.shape == (len(LENGTHS), DIM)
    np.testing.assert_allclose(actual, reference(hidden, mask, mode), rtol=1e-5, atol=1e-5)


def test_every_declared_mode_is_tested() -> None:
    assert set(POOLING_MODES) == {
        "cls",
        "max",
        "mean",
        "mean_sqrt_len_tokens",
        "weightedmean",
        "lasttoken",
    }


def test_modes_are_concatenated_in_the_given_order() -> None:
    hidden, mask = batch(1)
    modes = ("max", "cls", "mean")
    expected = np.concatenate([reference(hidden, mask, mode) for mode in modes], axis=1)
    np.testing.assert_allclose(run_pool(hidden, mask, modes), expected, rtol=1e-5, atol=1e-5)


def test_bfloat16_hidden_states_are_pooled_in_float32() -> None:
    hidden, mask = batch(2)
    as_bf16 = torch.from_numpy(hidden).to(torch.bfloat16)
    pooled = pool(as_bf16, torch.from_numpy(mask), ("mean",))
    assert pooled.dtype == torch.float32
    # The reference sees the same bf16-rounded inputs; only the accumulation precision differs.
    expected = reference(as_bf16.float().numpy(), mask, "mean")
    np.testing.assert_allclose(pooled.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_unknown_mode_is_an_error() -> None:
    hidden, mask = batch()
    with pytest.raises(ValueError, match="unknown pooling mode"):
        run_pool(hidden, mask, ("median",))


def packed(
    hidden: np.ndarray, pool_from: list[int] | None = None
) -> tuple[torch.Tensor, PackedRows]:
    """The batch's real tokens packed as collate packs them, large garbage in the padding."""
    starts = pool_from or [0] * len(LENGTHS)
    items = [
        text_item(RequestGroup(1), 0, [5] * length, pool_from=start)
        for length, start in zip(LENGTHS, starts, strict=True)
    ]
    batch = collate(items, True, pad_token_id=0, max_row_length=SEQ)
    assert batch.packed is not None
    rows, length = batch.input_ids.shape
    assert rows < len(LENGTHS)  # some rows hold several sequences
    out = np.random.default_rng(9).uniform(-1e3, 1e3, size=(rows, length, DIM))
    for index, (row, offset) in enumerate(batch.packed.places):
        out[row, offset : offset + LENGTHS[index]] = hidden[index, : LENGTHS[index]]
    return torch.from_numpy(out.astype(np.float32)), batch.packed


def run_pool_segments(hidden: torch.Tensor, rows: PackedRows, modes: tuple[str, ...]) -> np.ndarray:
    segments, weights, positions, first, last = (
        torch.from_numpy(array)
        for array in (rows.segments, rows.pool_weights, rows.positions, rows.first, rows.last)
    )
    pooled = pool_segments(hidden, segments, weights, positions, first, last, modes)
    return pooled.numpy()


@pytest.mark.parametrize("mode", POOLING_MODES)
def test_each_mode_over_a_packed_batch_matches_the_reference(mode: str) -> None:
    hidden, mask = batch(3)
    tokens, rows = packed(hidden)
    actual = run_pool_segments(tokens, rows, (mode,))
    np.testing.assert_allclose(actual, reference(hidden, mask, mode), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", POOLING_MODES)
def test_a_packed_batch_leaves_out_the_prompt_as_a_padded_one(mode: str) -> None:
    """Tokens before `pool_from` (a prompt, include_prompt: false) are not pooled."""
    hidden, mask = batch(4)
    starts = [3, 0, 2, 1, 1]
    pool_mask = mask.copy()
    for row, start in enumerate(starts):
        pool_mask[row, :start] = 0
    expected = pool(torch.from_numpy(hidden), torch.from_numpy(pool_mask), (mode,)).numpy()
    tokens, rows = packed(hidden, starts)
    actual = run_pool_segments(tokens, rows, (mode,))
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5)
