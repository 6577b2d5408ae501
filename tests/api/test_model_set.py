"""`ModelSet`: several models in one program (the Python side of `serve --config`), on one CPU
pool, each answering as it does alone."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from poolserve import EngineConfig, ModelConfig, ModelSet, ServedModel
from poolserve.errors import ModelLoadError, ModelNotFoundError, SettingError
from tests.api.helpers import load_engine
from tests.e2e.harness import TEXTS

QUERY = "Which animal jumps over the dog?"


@pytest.fixture(scope="module")
def models(model_path: Path, cross_encoder_dir: Path) -> Iterator[ModelSet]:
    with ModelSet.load(
        [
            ServedModel(ModelConfig(model=str(model_path), dtype="float32"), EngineConfig(), None),
            ServedModel(
                ModelConfig(model=str(cross_encoder_dir), dtype="float32"),
                EngineConfig(runners=1),
                ("reranker", "ce"),
            ),
        ],
        cpu_workers=2,
    ) as loaded:
        yield loaded


def test_each_model_answers_as_it_does_alone(
    models: ModelSet, engine: Any, model_path: Path, cross_encoder_dir: Path
) -> None:
    # A directory's model is named after it.
    assert models.names == (model_path.name, "reranker", "ce")
    embedder = models.engine()  # the first
    assert embedder.name == model_path.name and embedder.embedding_dim == 384
    np.testing.assert_allclose(embedder.embed(TEXTS), engine.embed(TEXTS), atol=2e-6)
    alone = load_engine(cross_encoder_dir)
    try:
        expected = alone.score(QUERY, TEXTS[:6])
    finally:
        alone.close()
    for name in ("reranker", "ce"):
        np.testing.assert_allclose(models[name].score(QUERY, TEXTS[:6]), expected, atol=1e-6)


def test_a_models_log_lines_name_it_as_clients_do(
    models: ModelSet, cross_encoder_dir: Path
) -> None:
    """Two entries of one checkpoint stay apart in the log: its lines carry the first served
    name (the spec's), while /v1/models' `root` stays the checkpoint."""
    assert [service.core.model.name for service in models] == [models.names[0], "reranker"]
    assert models["ce"].name == cross_encoder_dir.name


def test_models_share_one_cpu_pool(models: ModelSet) -> None:
    pools = {id(service.core.cpu) for service in models}
    assert pools == {id(models.cpu)} and models.cpu.workers == 2


def test_an_unknown_name_lists_the_served_ones(models: ModelSet, model_path: Path) -> None:
    with pytest.raises(ModelNotFoundError) as refused:
        models["gpt-4"]
    assert f"{model_path.name!r}, 'reranker', 'ce'" in refused.value.message


def test_closing_an_engine_of_the_set_leaves_the_model_serving(models: ModelSet) -> None:
    engine = models["reranker"]
    assert engine.close() is True
    assert models["reranker"].score(QUERY, ["a document"]).shape == (1,)


def test_a_model_file_loads_as_the_command_line_reads_it(
    tmp_path: Path, model_path: Path, engine: Any
) -> None:
    config = tmp_path / "models.yaml"
    config.write_text(f"models:\n  - model: {model_path}\n    dtype: float32\n")
    with ModelSet.load(config) as loaded:
        assert loaded.names == (model_path.name,)
        np.testing.assert_allclose(
            loaded.engine().embed(TEXTS[:3]), engine.embed(TEXTS[:3]), atol=2e-6
        )


def test_a_model_that_fails_to_load_is_named_and_nothing_is_left_running(
    tmp_path: Path, model_path: Path
) -> None:
    before = {thread.ident for thread in threading.enumerate()}
    with pytest.raises(ModelLoadError) as failed:
        ModelSet.load([str(model_path), str(tmp_path / "missing")])
    assert str(failed.value).startswith(f"model 2 ({tmp_path / 'missing'}): ")
    left = [
        thread.name
        for thread in threading.enumerate()
        if thread.ident not in before and thread.name.startswith("poolserve") and thread.is_alive()
    ]
    assert left == [], left


def test_two_models_under_one_name_are_refused_before_loading(model_path: Path) -> None:
    same = ServedModel(ModelConfig(model=str(model_path)), EngineConfig(), ("m",))
    with pytest.raises(SettingError, match="both served as 'm'"):
        ModelSet.load([same, same])
