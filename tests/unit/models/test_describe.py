"""A checkpoint described and loaded through the public `Engine`: clear errors for what cannot
load (before any weights are read, so they are fast), the length limits a description gives, and
a hub model's settings checked from its description alone."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

from poolserve import Engine, EngineConfig, ModelConfig
from poolserve.errors import EngineUnavailableError, InputTooLongError, ModelLoadError
from poolserve.models.describe import prepare_model
from tests.reference import FP32_COSINE, assert_close_vectors, st_encode, text_with_tokens

# One CPU thread, a small batch budget: engines that load quickly.
SMALL_ENGINE = EngineConfig(cpu_workers=1, max_batch_tokens=4096)


@pytest.mark.parametrize(
    "model",
    ["/nonexistent/model-dir", "./no-such-model-dir", "~/no-such-model-dir", "a/b/c"],
)
def test_missing_directory_is_a_clear_load_error(model: str) -> None:
    with pytest.raises(ModelLoadError, match="does not exist") as caught:
        Engine(model)
    assert model in str(caught.value)


def test_directory_without_config_is_a_load_error(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match=r"no config\.json"):
        Engine(str(tmp_path))


@pytest.mark.parametrize("hub_id", ["nonexistent-org/nonexistent-model", "no-such-model-xyz"])
def test_hub_id_while_offline_is_a_load_error_not_a_traceback(hub_id: str) -> None:
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    with pytest.raises(ModelLoadError) as caught:
        Engine(hub_id)
    message = str(caught.value)
    assert hub_id in message
    assert "offline" in message
    assert "local directory" in message  # says how to fix it


def test_unknown_dtype_is_a_load_error() -> None:
    with pytest.raises(ModelLoadError, match="dtype must be auto, float32, bfloat16 or float16"):
        Engine(model_config=ModelConfig(dtype="float8"))  # type: ignore[arg-type]


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_cuda_is_a_load_error() -> None:
    with pytest.raises(ModelLoadError, match="cuda"):
        Engine(model_config=ModelConfig(device="cuda"))


def test_batch_budget_below_the_model_length_caps_the_length_served(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with (
        caplog.at_level("INFO"),
        Engine(engine_config=EngineConfig(max_batch_tokens=100)) as engine,
    ):
        assert engine.service.max_model_len == 100
        with pytest.raises(InputTooLongError, match="100"):
            engine.embed(["word " * 150])
    (line,) = [r.getMessage() for r in caplog.records if "length limit" in r.getMessage()]
    assert "256" in line and "--max-batch-tokens 100" in line


def test_max_model_len_above_the_batch_budget_is_a_load_error() -> None:
    with pytest.raises(ModelLoadError, match=r"100.*200"):
        Engine(
            model_config=ModelConfig(max_model_len=200),
            engine_config=EngineConfig(max_batch_tokens=100),
        )


@pytest.mark.parametrize(
    ("options", "python_words"),
    [
        ({"model_config": ModelConfig(max_model_len=600)}, "max_model_len=600 is more than"),
        (
            {
                "model_config": ModelConfig(max_model_len=200),
                "engine_config": EngineConfig(max_batch_tokens=100),
            },
            "max_batch_tokens=100 is less",
        ),
        ({"engine_config": EngineConfig(runners=0)}, "runners must be at least 1"),
    ],
)
def test_a_setting_that_cannot_work_speaks_python_in_python(
    options: dict[str, Any], python_words: str
) -> None:
    """The same refusal names the flag on the command line and the argument in Python."""
    with pytest.raises(ModelLoadError) as caught:
        Engine(**options)
    assert python_words in str(caught.value)
    assert "--" not in str(caught.value)
    assert "--" in getattr(caught.value, "cli_message", "")


def test_directory_without_weights_is_a_load_error(model_path: Path, tmp_path: Path) -> None:
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (tmp_path / name).symlink_to(model_path / name)
    with pytest.raises(ModelLoadError, match="cannot load the model"):
        Engine(model_config=ModelConfig(model=str(tmp_path)), engine_config=SMALL_ENGINE)


@pytest.mark.parametrize(
    ("task", "missing"),
    [
        ("score", "classifier.weight"),
        ("classify", "classifier.weight"),
        ("token_classifier", "classifier.weight"),
        ("sparse", "cls.predictions"),
    ],
)
def test_a_task_whose_head_the_checkpoint_lacks_refuses_to_load(
    task: str, missing: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """Forcing a head onto an embedding checkpoint would serve a randomly initialised layer;
    the refusal is poolserve's one line, without transformers' load report before it."""
    with pytest.raises(ModelLoadError) as caught:
        Engine(model_config=ModelConfig(task=task), engine_config=SMALL_ENGINE)
    printed = capfd.readouterr()
    assert "LOAD REPORT" not in printed.out + printed.err
    message = str(caught.value)
    assert missing in message
    assert f"task={task!r}" in message
    assert "random" in message


def test_an_embedding_checkpoint_without_its_unused_pooler_loads(
    model_path: Path, tmp_path: Path, load_engine: Any, st_model: Any
) -> None:
    """The pooler's output is never read, so a checkpoint saved without it is complete."""
    for item in model_path.iterdir():
        if item.name != "model.safetensors":
            (tmp_path / item.name).symlink_to(item)
    state = load_file(str(model_path / "model.safetensors"))
    assert any(key.startswith("pooler.") for key in state)
    save_file(
        {k: v for k, v in state.items() if not k.startswith("pooler.")},
        tmp_path / "model.safetensors",
    )
    texts = ["a sentence without a pooler", "and another"]
    vectors = load_engine(tmp_path).embed(texts)
    assert_close_vectors(vectors, st_encode(st_model, texts), FP32_COSINE)


def test_broken_tokenizer_is_a_load_error(model_path: Path, tmp_path: Path) -> None:
    (tmp_path / "config.json").symlink_to(model_path / "config.json")
    (tmp_path / "tokenizer.json").write_text('{"not": "a tokenizer"}')
    with pytest.raises(ModelLoadError, match="tokenizer"):
        Engine(str(tmp_path))


def test_max_model_len_override_limits_and_truncates(
    load_engine: Any, st_model: Any, hf_tokenizer: Any
) -> None:
    engine = load_engine(None, max_model_len=128)
    assert engine.max_model_len == 128
    text = text_with_tokens(hf_tokenizer, 200, seed=5)
    with pytest.raises(InputTooLongError, match=r"200 tokens.*at most 128"):
        engine.embed([text])
    expected = st_encode(st_model, [text], max_length=128)
    assert_close_vectors(engine.embed([text], truncate_prompt_tokens=-1), expected)


def test_directory_without_sentence_bert_config_uses_the_model_and_tokenizer_limit(
    model_path: Path, tmp_path: Path, load_engine: Any, st_model: Any, hf_tokenizer: Any
) -> None:
    directory = tmp_path / "minilm-plain"
    directory.mkdir()
    for entry in model_path.iterdir():
        if entry.name != "sentence_bert_config.json":
            (directory / entry.name).symlink_to(entry)
    engine = load_engine(directory)
    assert engine.max_model_len == 512  # min(max_position_embeddings, model_max_length)
    assert engine.name == "minilm-plain"

    text = text_with_tokens(hf_tokenizer, 400, seed=7)
    expected = st_encode(st_model, [text], max_length=512)
    assert_close_vectors(engine.embed([text]), expected, FP32_COSINE)


def test_a_closed_engine_refuses_work(load_engine: Any) -> None:
    engine = load_engine(None)
    assert engine.alive
    engine.close()
    assert not engine.alive
    with pytest.raises(EngineUnavailableError):
        engine.embed(["too late"])


def test_start_up_says_what_each_stage_took(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("INFO"), Engine(engine_config=EngineConfig(runners=2)):
        pass
    messages = [record.getMessage() for record in caplog.records]
    (weights,) = [m for m in messages if "weights loaded in" in m]
    warm_ups = [m for m in messages if "a runner warmed up in" in m]
    assert weights.startswith("sentence-transformers/all-MiniLM-L6-v2: weights loaded in ")
    assert len(warm_ups) == 2 and all(m.endswith("s (eager)") for m in warm_ups), warm_ups


def test_settings_are_checked_from_a_hub_models_description_without_its_weights(
    model_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checks before serving (the command line's, the Ray driver's) download a hub model's
    configs and tokenizer only: what `snapshot_download` is asked for decides what comes."""
    import fnmatch
    import shutil

    import huggingface_hub

    asked: list[list[str]] = []

    def snapshot_download(repo_id: str, *, revision: str | None, allow_patterns: list[str]) -> str:
        asked.append(allow_patterns)
        copy = tmp_path / f"snapshot-{len(asked)}"
        for path in model_path.rglob("*"):
            name = str(path.relative_to(model_path))
            if path.is_file() and any(fnmatch.fnmatch(name, p) for p in allow_patterns):
                (copy / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(path, copy / name)
        return str(copy)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    config = ModelConfig(model="someone/all-MiniLM-L6-v2-copy")
    spec = prepare_model(config, weights=False)
    assert spec.max_model_len == 256 and spec.embedding_dim == 384
    assert not list(spec.layout.directory.rglob("*.safetensors"))
    assert not any(fnmatch.fnmatch("model.safetensors", p) for p in asked[-1])
    served = prepare_model(config)
    assert list(served.layout.directory.rglob("*.safetensors"))
