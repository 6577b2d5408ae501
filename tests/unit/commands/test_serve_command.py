"""`poolserve serve` refuses what cannot work in one line, before it loads anything."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from poolserve.commands import main
from tests.e2e.conftest import free_port


def test_serve_with_a_missing_model_exits_1_with_the_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.ERROR, logger="poolserve"):
        assert main(["serve", "/nonexistent/model-dir", "--log-level", "error"]) == 1
    assert "cannot start" in caplog.text
    assert "/nonexistent/model-dir" in caplog.text


def test_serve_with_a_task_the_checkpoint_has_no_weights_for_exits_1(
    caplog: pytest.LogCaptureFixture,
) -> None:
    argv = ["serve", "--task", "score", "--port", str(free_port()), "--log-level", "error"]
    with caplog.at_level(logging.ERROR, logger="poolserve"):
        assert main(argv) == 1
    errors = [
        record.getMessage() for record in caplog.records if record.name.startswith("poolserve")
    ]
    assert len(errors) == 1, errors
    assert "classifier.weight" in errors[0]
    assert "task='score'" in errors[0]


def test_a_request_limit_below_the_models_length_stops_start_up_before_loading(
    caplog: pytest.LogCaptureFixture,
) -> None:
    argv = ["serve", "--max-request-tokens", "200", "--max-client-batch-size", "50"]
    argv += ["--port", str(free_port()), "--log-level", "error"]
    with caplog.at_level(logging.INFO, logger="poolserve"):
        assert main(argv) == 1
    assert "--max-request-tokens 200 is less than the model's length limit 256" in caplog.text
    # Refused once the model was described, before it began to load.
    assert "loading the bundled default model" not in caplog.text
    assert "loaded " not in caplog.text  # the weights were never read


def copy_with_a_bad_default_prompt(model_path: Path, directory: Path) -> Path:
    """The bundled model, its config_sentence_transformers.json naming a default prompt it
    lacks (its other files linked, not copied)."""
    directory.mkdir()
    for file in model_path.iterdir():
        (directory / file.name).symlink_to(file)
    st_config = json.loads((model_path / "config_sentence_transformers.json").read_text())
    st_config.update(prompts={"query": "query: "}, default_prompt_name="passage")
    target = directory / "config_sentence_transformers.json"
    target.unlink()
    target.write_text(json.dumps(st_config))
    return directory


def test_what_cannot_work_is_refused_before_any_model_loads(
    model_path: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A checkpoint whose default prompt is not among its prompts, and a model file whose
    second entry cannot work: each refused in one line, the first model never loaded."""
    bad = copy_with_a_bad_default_prompt(model_path, tmp_path / "bad-prompt")
    models = tmp_path / "models.toml"
    models.write_text(f'[[models]]\nmodel = "{model_path}"\n\n[[models]]\nmodel = "{bad}"\n')
    for argv, refusal in (
        ([str(bad)], "default_prompt_name 'passage' is not among its prompts"),
        (["--config", str(models)], "model 2"),
    ):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="poolserve"):
            assert main(["serve", *argv, "--port", str(free_port())]) == 1
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1 and refusal in errors[0], errors
        assert "loading " not in caplog.text and "weights loaded" not in caplog.text
