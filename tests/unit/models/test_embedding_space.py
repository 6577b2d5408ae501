"""The embedding space's fingerprint follows what decides the space: another weight, pooling
mode or Dense layer, normalization or dimension gives another one; another precision, runner
count or batch budget the same one. Real sentence-transformers layouts of a tiny BERT."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from poolserve import EngineConfig, ModelConfig
from poolserve.models.embedding_space import (
    EmbeddingSpace,
    model_folders,
    weights_digest,
)
from poolserve.models.layout import read_layout
from poolserve.offline.model_engine import Engine
from tests.tiny_models import _bert_config, _save_hf, _write_json


def make_st_embedding(directory: Path, *, mode: str = "mean", dense: int | None = None) -> Path:
    """A tiny BERT saved as sentence-transformers saves an embedding model: the transformer at
    the root, 1_Pooling, an optional 2_Dense, then Normalize."""
    from transformers import BertModel

    torch.manual_seed(0)
    _save_hf(BertModel(_bert_config()), directory)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {
            "idx": 1,
            "name": "1",
            "path": "1_Pooling",
            "type": "sentence_transformers.models.Pooling",
        },
    ]
    _write_json(
        directory / "1_Pooling" / "config.json",
        {"word_embedding_dimension": 32, f"pooling_mode_{mode}_tokens": True},
    )
    if dense is not None:
        from safetensors.torch import save_file

        modules.append(
            {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}
        )
        _write_json(
            directory / "2_Dense" / "config.json",
            {
                "in_features": 32,
                "out_features": dense,
                "bias": True,
                "activation_function": "torch.nn.modules.linear.Identity",
            },
        )
        save_file(
            {"linear.weight": torch.randn(dense, 32), "linear.bias": torch.zeros(dense)},
            str(directory / "2_Dense" / "model.safetensors"),
        )
    modules.append(
        {
            "idx": len(modules),
            "name": str(len(modules)),
            "path": f"{len(modules)}_Normalize",
            "type": "sentence_transformers.models.Normalize",
        }
    )
    _write_json(directory / "modules.json", modules)
    _write_json(directory / "sentence_bert_config.json", {"max_seq_length": 128})
    return directory


def space_of(directory: Path, cache: Path) -> EmbeddingSpace:
    layout = read_layout(directory)
    tokenizer = (directory / "tokenizer.json").read_text()
    return EmbeddingSpace.of(layout, tokenizer, weights_digest(model_folders(layout), cache))


def fingerprint(space: EmbeddingSpace, **asked: object) -> str:
    options: dict[str, object] = {"head": "embed", "normalize": True, "dimensions": 32, **asked}
    return space.fingerprint(**options)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_st_embedding(tmp_path_factory.mktemp("space") / "base")


def test_the_weights_pooling_and_dense_layers_decide_the_space(base: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    reference = fingerprint(space_of(base, cache))
    assert fingerprint(space_of(base, cache)) == reference, "the same model, the same space"
    assert list((cache / "embedding-space").iterdir()), "the weights' digest is cached"

    copy = tmp_path / "copy"
    shutil.copytree(base, copy)
    assert fingerprint(space_of(copy, cache)) == reference, "a copy is the same space"
    (copy / "pytorch_model.bin").write_bytes(b"a pickled copy another tool left")
    assert fingerprint(space_of(copy, cache)) == reference, "a copy that is not loaded"

    from safetensors.torch import load_file, save_file

    weights = load_file(str(copy / "model.safetensors"))
    name = next(iter(weights))
    weights[name] = weights[name] + 1e-3
    save_file(weights, str(copy / "model.safetensors"), metadata={"format": "pt"})
    changed_weights = fingerprint(space_of(copy, cache))

    pooled = tmp_path / "cls"
    shutil.copytree(base, pooled)
    _write_json(
        pooled / "1_Pooling" / "config.json",
        {"word_embedding_dimension": 32, "pooling_mode_cls_token": True},
    )
    dense = make_st_embedding(tmp_path / "dense", dense=32)
    others = {
        changed_weights,
        fingerprint(space_of(pooled, cache)),
        fingerprint(space_of(dense, cache)),
    }
    assert len(others) == 3 and reference not in others


def test_a_request_s_normalization_dimension_and_type_decide_it_too(
    base: Path, tmp_path: Path
) -> None:
    space = space_of(base, tmp_path)
    reference = fingerprint(space)
    asked = [
        fingerprint(space, normalize=False),
        fingerprint(space, dimensions=16),
        fingerprint(space, embedding_type="int8"),
        fingerprint(space, head="token_embed"),
    ]
    assert len(set(asked)) == len(asked) and reference not in asked
    # An image-text model's image vectors share the text vectors' space.
    assert fingerprint(space, head="image_embed") == reference


def test_precision_runners_and_batch_budget_leave_the_space_alone(base: Path) -> None:
    spaces = set()
    for dtype, runners, budget in (("float32", 1, 16384), ("bfloat16", 2, 512)):
        engine = Engine(
            model_config=ModelConfig(model=str(base), dtype=dtype),
            engine_config=EngineConfig(runners=runners, max_batch_tokens=budget),
        )
        with engine:
            spaces.add(engine.embedding_space())
            assert engine.embedding_space(dimensions=16) not in spaces
    assert len(spaces) == 1
    with pytest.raises(ValueError, match="embedding_type must be float"):
        engine.embedding_space(embedding_type="float16")
