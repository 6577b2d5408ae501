"""What kind a model directory is: sentence-transformers' files decide before the class name,
and a class name that could be several kinds is refused with the `--task` that serves it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from poolserve.errors import SettingError
from poolserve.models.kinds import detect_kind
from poolserve.models.layout import read_layout


def model_copy(model_path: Path, directory: Path, **config: object) -> Path:
    """The bundled model's files without its weights, config.json edited."""
    shutil.copytree(model_path, directory, ignore=shutil.ignore_patterns("*.safetensors", "*.bin"))
    path = directory / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **config}))
    return directory


def drop_modules(directory: Path) -> Path:
    (directory / "modules.json").unlink()
    return directory


@pytest.mark.parametrize(
    "architecture", ["BertForMaskedLM", "BertForSequenceClassification", "BertLMHeadModel"]
)
def test_a_pooling_module_makes_an_embedding_model_whatever_the_class_says(
    model_path: Path, tmp_path: Path, architecture: str
) -> None:
    """all-mpnet-base-v2 says MPNetForMaskedLM and Qwen3-Embedding Qwen3ForCausalLM: their
    Transformer + Pooling modules make them embedding models, as sentence-transformers loads
    them."""
    directory = model_copy(model_path, tmp_path / "m", architectures=[architecture])
    assert detect_kind(read_layout(directory)) == "embedding"


def test_a_bare_masked_lm_is_refused_naming_the_tasks(model_path: Path, tmp_path: Path) -> None:
    directory = drop_modules(
        model_copy(model_path, tmp_path / "m", architectures=["BertForMaskedLM"])
    )
    with pytest.raises(SettingError) as raised:
        detect_kind(read_layout(directory))
    message = raised.value.cli_message
    assert "--task sparse" in message and "--task embedding" in message and "\n" not in message
    assert detect_kind(read_layout(directory), "sparse") == "sparse"


def test_a_causal_lm_without_pooling_is_never_a_mean_pooled_embedder(
    model_path: Path, tmp_path: Path
) -> None:
    directory = drop_modules(
        model_copy(model_path, tmp_path / "m", architectures=["BertLMHeadModel"])
    )
    layout = read_layout(directory)
    with pytest.raises(SettingError) as raised:
        detect_kind(layout)
    assert "--task cross_encoder" in raised.value.cli_message
    assert "Qwen3-Reranker" in raised.value.cli_message
    # Forced to embed, a decoder pools its last token, as decoder embedders do.
    assert detect_kind(layout, "embedding") == "embedding"
    assert layout.pooling_modes == ("lasttoken",)


def test_cross_encoder_files_make_a_cross_encoder(model_path: Path, tmp_path: Path) -> None:
    """sentence-transformers 4's CrossEncoder section in config.json, on a class name that
    says nothing of it."""
    directory = drop_modules(
        model_copy(
            model_path,
            tmp_path / "m",
            architectures=["BertModel"],
            sentence_transformers={"activation_fn": "torch.nn.modules.activation.Sigmoid"},
            num_labels=1,
        )
    )
    assert detect_kind(read_layout(directory)) == "cross_encoder"


def test_plain_encoder_classes_stay_embedding_models(model_path: Path, tmp_path: Path) -> None:
    directory = drop_modules(model_copy(model_path, tmp_path / "m"))
    layout = read_layout(directory)
    assert detect_kind(layout) == "embedding" and layout.pooling_modes == ("mean",)
