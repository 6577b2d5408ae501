"""Reading a model directory's layout: length limit, pooling modes, Dense and Normalize modules."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from poolserve.errors import ModelLoadError
from poolserve.models.layout import read_layout

# Only the small files: the layout is read before any weights are.
_WEIGHTS = ("*.safetensors", "*.bin", "*.onnx", "*.md", "data_config.json")


def copy_model(model_path: Path, target: Path) -> Path:
    shutil.copytree(model_path, target, ignore=shutil.ignore_patterns(*_WEIGHTS))
    return target


def edit_json(path: Path, **changes: object) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def test_bundled_model_layout(model_path: Path) -> None:
    layout = read_layout(model_path)
    assert layout.max_model_len == 256  # sentence_bert_config.json's max_seq_length
    assert layout.pooling_modes == ("mean",)
    assert layout.normalize is True  # modules.json lists a Normalize module
    assert layout.dense == ()
    assert layout.hidden_size == 384
    assert layout.embedding_dim == 384
    assert layout.architecture == "BertModel"


def test_max_model_len_may_lower_the_limit_but_not_raise_it(model_path: Path) -> None:
    assert read_layout(model_path, max_model_len=128).max_model_len == 128
    with pytest.raises(ModelLoadError, match=r"300.*256"):
        read_layout(model_path, max_model_len=300)


def test_without_sentence_bert_config_the_limit_is_the_smaller_of_model_and_tokenizer(
    model_path: Path, tmp_path: Path
) -> None:
    directory = copy_model(model_path, tmp_path / "model")
    (directory / "sentence_bert_config.json").unlink()
    # Both say 512 in the bundled files.
    assert read_layout(directory).max_model_len == 512

    edit_json(directory / "tokenizer_config.json", model_max_length=384)
    assert read_layout(directory).max_model_len == 384

    edit_json(directory / "config.json", max_position_embeddings=200)
    assert read_layout(directory).max_model_len == 200


def test_tokenizer_without_a_limit_leaves_the_model_limit(model_path: Path, tmp_path: Path) -> None:
    directory = copy_model(model_path, tmp_path / "model")
    (directory / "sentence_bert_config.json").unlink()
    edit_json(directory / "tokenizer_config.json", model_max_length=int(1e30))
    assert read_layout(directory).max_model_len == 512


def test_plain_transformers_directory_means_mean_pooling_and_normalize(
    model_path: Path, tmp_path: Path
) -> None:
    directory = copy_model(model_path, tmp_path / "model")
    (directory / "modules.json").unlink()
    layout = read_layout(directory)
    assert layout.pooling_modes == ("mean",)
    assert layout.normalize is True


def test_without_normalize_module_normalize_is_false(model_path: Path, tmp_path: Path) -> None:
    directory = copy_model(model_path, tmp_path / "model")
    modules = json.loads((directory / "modules.json").read_text())
    modules = [m for m in modules if not m["type"].endswith("Normalize")]
    (directory / "modules.json").write_text(json.dumps(modules))
    assert read_layout(directory).normalize is False


@pytest.mark.parametrize(
    ("pooling_config", "expected"),
    [
        ({"pooling_mode": "cls"}, ("cls",)),
        ({"pooling_mode": ["max", "lasttoken"]}, ("max", "lasttoken")),
        ({"pooling_mode_mean_tokens": True}, ("mean",)),
        (
            # The legacy boolean keys concatenate in sentence-transformers' order.
            {"pooling_mode_mean_tokens": True, "pooling_mode_cls_token": True},
            ("cls", "mean"),
        ),
        ({"pooling_mode_weightedmean_tokens": True}, ("weightedmean",)),
        ({"pooling_mode_mean_sqrt_len_tokens": True}, ("mean_sqrt_len_tokens",)),
    ],
)
def test_pooling_config_formats(
    model_path: Path, tmp_path: Path, pooling_config: dict[str, object], expected: tuple[str, ...]
) -> None:
    directory = copy_model(model_path, tmp_path / "model")
    (directory / "1_Pooling" / "config.json").write_text(
        json.dumps({"word_embedding_dimension": 384, **pooling_config})
    )
    layout = read_layout(directory)
    assert layout.pooling_modes == expected
    assert layout.embedding_dim == 384 * len(expected)


def test_unknown_pooling_mode_is_a_load_error(model_path: Path, tmp_path: Path) -> None:
    directory = copy_model(model_path, tmp_path / "model")
    (directory / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode": "median"}))
    with pytest.raises(ModelLoadError, match="median"):
        read_layout(directory)


def test_dense_module_sets_the_embedding_dim(model_path: Path, tmp_path: Path) -> None:
    directory = copy_model(model_path, tmp_path / "model")
    modules = json.loads((directory / "modules.json").read_text())
    modules.insert(2, {"idx": 2, "name": "2", "path": "2_Dense", "type": "x.models.Dense"})
    (directory / "modules.json").write_text(json.dumps(modules))
    (directory / "2_Dense").mkdir()
    (directory / "2_Dense" / "config.json").write_text(
        json.dumps(
            {
                "in_features": 384,
                "out_features": 128,
                "bias": False,
                "activation_function": "torch.nn.modules.activation.Tanh",
            }
        )
    )
    layout = read_layout(directory)
    assert len(layout.dense) == 1
    spec = layout.dense[0]
    assert (spec.in_features, spec.out_features, spec.bias) == (384, 128, False)
    assert spec.activation.endswith("Tanh")
    assert layout.embedding_dim == 128


def test_sizes_come_from_the_config_class_not_raw_keys(tmp_path: Path) -> None:
    """DistilBERT calls its width `dim`: transformers' config class maps it to hidden_size."""
    from transformers import DistilBertConfig

    directory = tmp_path / "distilbert"
    config = DistilBertConfig(dim=48, hidden_dim=96, n_layers=1, n_heads=2)
    config.architectures = ["DistilBertModel"]
    config.save_pretrained(directory)
    assert "hidden_size" not in json.loads((directory / "config.json").read_text())
    layout = read_layout(directory)
    assert (layout.hidden_size, layout.embedding_dim, layout.max_model_len) == (48, 48, 512)


def test_a_model_type_transformers_does_not_know_is_a_one_line_load_error(
    model_path: Path, tmp_path: Path
) -> None:
    directory = copy_model(model_path, tmp_path / "model")
    edit_json(directory / "config.json", model_type="no_such_model")
    with pytest.raises(ModelLoadError, match="no_such_model") as raised:
        read_layout(directory)
    assert "\n" not in str(raised.value)


def test_code_shipped_with_the_model_needs_trust_remote_code(
    model_path: Path, tmp_path: Path
) -> None:
    directory = copy_model(model_path, tmp_path / "model")
    edit_json(
        directory / "config.json",
        model_type="my_custom_bert",
        auto_map={"AutoConfig": "configuration_x.XConfig", "AutoModel": "modeling_x.XModel"},
    )
    with pytest.raises(ModelLoadError, match="--trust-remote-code") as raised:
        read_layout(directory)
    assert "\n" not in str(raised.value)


def test_unreadable_config_is_a_load_error(model_path: Path, tmp_path: Path) -> None:
    directory = copy_model(model_path, tmp_path / "model")
    (directory / "config.json").write_text("{not json")
    with pytest.raises(ModelLoadError, match=r"config\.json"):
        read_layout(directory)
