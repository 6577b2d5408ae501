"""Dense layers stored beside the encoder, rebuilt from their files (sentence-transformers'
Dense modules), checked against sentence-transformers and torch's own linear algebra."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from poolserve.backends.torch_model.dense import build_dense
from poolserve.errors import ModelLoadError
from poolserve.models.layout import DenseSpec
from tests.reference import FP32_COSINE, assert_close_vectors


def test_dense_module_matches_sentence_transformers(
    tmp_path: Path, load_engine: Any, st_model: Any
) -> None:
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.models import Dense, Normalize

    torch.manual_seed(0)
    dense = Dense(384, 96, activation_function=torch.nn.Tanh())
    reference = SentenceTransformer(
        modules=[st_model[0], st_model[1], dense, Normalize()], device="cpu"
    )
    reference.save(str(tmp_path / "with-dense"))
    texts = ["a dense projection", "漢字とカタカナ", "short", "word " * 50]

    engine = load_engine(tmp_path / "with-dense")
    assert engine.embedding_dim == 96
    actual = engine.embed(texts)
    assert actual.shape == (4, 96)
    expected = reference.encode(texts, normalize_embeddings=True, convert_to_numpy=True)
    assert_close_vectors(actual, expected, FP32_COSINE, texts)


def test_build_dense_applies_linear_then_activation(tmp_path: Path) -> None:
    torch.manual_seed(1)
    weight, bias = torch.randn(3, 5), torch.randn(3)
    save_file({"linear.weight": weight, "linear.bias": bias}, str(tmp_path / "model.safetensors"))
    spec = DenseSpec(tmp_path, 5, 3, True, "torch.nn.modules.activation.Tanh")
    x = torch.randn(4, 5)
    expected = np.tanh(x.double().numpy() @ weight.double().numpy().T + bias.double().numpy())
    with torch.no_grad():
        actual = build_dense(spec)(x).numpy()
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)


def test_build_dense_refuses_unknown_activation(tmp_path: Path) -> None:
    spec = DenseSpec(tmp_path, 5, 3, True, "my.module.CustomActivation")
    with pytest.raises(ModelLoadError, match="CustomActivation"):
        build_dense(spec)


def test_build_dense_without_weights_is_a_load_error(tmp_path: Path) -> None:
    spec = DenseSpec(tmp_path, 5, 3, True, "torch.nn.modules.linear.Identity")
    with pytest.raises(ModelLoadError, match=r"model\.safetensors"):
        build_dense(spec)


def test_build_dense_with_wrong_shapes_is_a_load_error(tmp_path: Path) -> None:
    save_file({"linear.weight": torch.zeros(2, 2)}, str(tmp_path / "model.safetensors"))
    spec = DenseSpec(tmp_path, 5, 3, True, "torch.nn.modules.linear.Identity")
    with pytest.raises(ModelLoadError, match="do not fit"):
        build_dense(spec)
