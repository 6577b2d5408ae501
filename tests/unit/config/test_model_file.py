"""`--config` model files: every format, the flags' own checks per entry, one-line refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from poolserve.commands import main
from poolserve.config import EngineConfig, ModelConfig, ServedModel
from poolserve.config.model_file import base_settings, read_model_file
from poolserve.errors import SettingError
from tests.e2e.conftest import free_port

BASE = base_settings(ModelConfig(), EngineConfig(max_batch_size=64, compile="auto"))
TWO_MODELS = {
    "models": [
        {
            "model": "/models/embedder",
            "served_model_name": ["embedder", "e5"],
            "dtype": "bfloat16",
            "prompts": {"query": "query: ", "passage": "passage: "},
            "max_batch_tokens": 8192,
        },
        {"model": "/models/reranker", "served_model_name": "reranker", "task": "score"},
    ]
}
EXPECTED = [
    ServedModel(
        ModelConfig(
            model="/models/embedder",
            dtype="bfloat16",
            prompts=(("query", "query: "), ("passage", "passage: ")),
        ),
        EngineConfig(max_batch_tokens=8192, max_batch_size=64, compile="auto"),
        ("embedder", "e5"),
    ),
    ServedModel(
        # vLLM's task name is accepted and read as the kind it names.
        ModelConfig(model="/models/reranker", task="score"),
        EngineConfig(max_batch_size=64, compile="auto"),
        ("reranker",),
    ),
]


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


TOML = """
[[models]]
model = "/models/embedder"
served_model_name = ["embedder", "e5"]
dtype = "bfloat16"
prompts = { query = "query: ", passage = "passage: " }
max_batch_tokens = 8192

[[models]]
model = "/models/reranker"
served_model_name = "reranker"
task = "score"
"""
YAML = """
models:
  - model: /models/embedder
    served_model_name: [embedder, e5]
    dtype: bfloat16
    prompts: {query: "query: ", passage: "passage: "}
    max-batch-tokens: 8192
  - model: /models/reranker
    served_model_name: reranker
    task: score
"""


@pytest.mark.parametrize(
    ("name", "text"),
    [("models.toml", TOML), ("models.yaml", YAML), ("models.json", json.dumps(TWO_MODELS))],
)
def test_every_format_gives_the_same_models(tmp_path: Path, name: str, text: str) -> None:
    """Keys as the flags name them (`_` or `-`); what an entry leaves out comes from the base
    (here: max_batch_size 64 and compile auto, as the command line would give)."""
    assert read_model_file(_write(tmp_path / name, text), BASE) == EXPECTED


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"model": "/m", "max_batch_size": 0}, "max_batch_size: '0' is not an integer from 1 up"),
        ({"model": "/m", "dtype": "f32"}, "dtype: 'f32' is not one of auto, float32"),
        ({"model": "/m", "max_batch_sise": 8}, "unknown setting `max_batch_sise`; did you mean"),
        ({"model": "/m", "cpu_workers": 4}, "`cpu_workers` is the server's"),
        ({"model": "/m", "prompts": ["query: "]}, "`prompts` maps prompt names to their texts"),
        ({"dtype": "float32"}, "each model is a mapping with a `model`"),
    ],
)
def test_a_bad_entry_is_refused_in_one_line_naming_it(
    tmp_path: Path, entry: dict[str, object], message: str
) -> None:
    path = _write(tmp_path / "m.json", json.dumps({"models": [{"model": "/ok"}, entry]}))
    with pytest.raises(SettingError) as refused:
        read_model_file(path, BASE)
    text = refused.value.cli_message
    assert f"--config {path}, model 2" in text and message in text, text
    assert "\n" not in text


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"model": "/m"}', "the file holds one key, `models`"),
        ('{"models": []}', "`models` must be a list of at least one model"),
        ('{"models": [', "not valid json"),
    ],
)
def test_a_bad_file_is_refused(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(SettingError, match=message):
        read_model_file(_write(tmp_path / "m.json", text), BASE)


def test_a_file_of_another_format_or_missing_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SettingError, match=r"name it \.toml, \.yaml, \.yml or \.json"):
        read_model_file(_write(tmp_path / "models.ini", "[models]"), BASE)
    with pytest.raises(SettingError, match="cannot read it"):
        read_model_file(tmp_path / "absent.toml", BASE)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["serve", "a", "--config", "m.toml"], "MODEL and --config"),
        (["serve", "--served-model-name", "x", "--config", "m.toml"], "--served-model-name and"),
        (["serve", "a", "b", "--served-model-name", "x"], "--served-model-name names one model"),
        (["serve", "a", "b", "--prompt", "q=query: "], "--prompt applies to one model"),
        (["serve", "a", "b", "--ray"], "--ray serves one model"),
    ],
)
def test_the_command_line_names_models_in_one_place(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_a_bad_model_file_stops_start_up_before_loading(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = _write(tmp_path / "m.toml", '[[models]]\nmodel = "/m"\nrunners = -1\n')
    argv = ["serve", "--config", str(config), "--port", str(free_port())]
    assert main(argv) == 1
    assert f"--config {config}, model 1 (/m): runners: '-1' is not an integer from 1" in (
        caplog.text
    )
