"""Pooling modes against float64 numpy references on right-padded batches.

Padded positions hold large garbage, so a mode that lets padding leak in fails loudly.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from poolserve.models.layout import POOLING_MODES
from poolserve.models.pooling import pool

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
