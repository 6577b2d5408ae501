"""Ray Data: `embed_dataset` over a pool of two engine actors gives the local engine's vectors
and token counts, row for row, and a wrong column fails with a message that says so."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import ray

from poolserve.config import EngineConfig, ModelConfig
from poolserve.ray import embed_dataset
from tests.conftest import StaticCheckpoints
from tests.reference import FP32_COSINE, WORDS, assert_close_vectors

pytestmark = [pytest.mark.slow, pytest.mark.ray]

FP32 = ModelConfig(dtype="float32")
EAGER = EngineConfig(compile="off")


def document(index: int) -> str:
    return " ".join(WORDS[(index * 11 + j) % len(WORDS)] for j in range(2 + index % 40))


def test_embed_dataset_equals_the_local_engine(ray_address: str, engine: Any) -> None:
    texts = [document(i) for i in range(600)]
    dataset = ray.data.from_items([{"id": i, "text": text} for i, text in enumerate(texts)])
    embedded = embed_dataset(
        dataset, replicas=2, batch_size=64, model_config=FP32, engine_config=EAGER
    )
    rows = sorted(embedded.take_all(), key=lambda row: row["id"])
    assert [row["id"] for row in rows] == list(range(len(texts)))
    assert [row["text"] for row in rows] == texts  # the dataset's columns are kept
    vectors = np.stack([np.asarray(row["embedding"], np.float32) for row in rows])
    assert_close_vectors(vectors, engine.embed(texts), FP32_COSINE, texts)
    assert [row["tokens"] for row in rows[:40]] == [len(engine.tokenize(t)) for t in texts[:40]]


def test_dimensions_and_truncation_pass_through(ray_address: str, engine: Any) -> None:
    long_text = " ".join(WORDS * 20)
    dataset = ray.data.from_items([{"body": long_text}, {"body": "short"}])
    rows = embed_dataset(
        dataset,
        column="body",
        dimensions=32,
        truncate=True,
        model_config=FP32,
        engine_config=EAGER,
    ).take_all()
    expected = engine.embed([long_text, "short"], dimensions=32, truncate_prompt_tokens=-1)
    assert_close_vectors([row["embedding"] for row in rows], expected)
    assert rows[0]["tokens"] == engine.max_model_len


def test_a_missing_column_fails_naming_the_columns(ray_address: str) -> None:
    dataset = ray.data.from_items([{"body": "hello"}])
    with pytest.raises(Exception, match=r"no column 'text'; its columns: body"):
        embed_dataset(dataset, model_config=FP32, engine_config=EAGER).take_all()


def test_a_static_model_embeds_on_ray_as_model2vec(
    ray_address: str, static_dirs: StaticCheckpoints
) -> None:
    from tests.static_models import model2vec_reference

    directory = static_dirs["model2vec"]
    texts = [document(i) for i in range(200)]
    dataset = ray.data.from_items([{"id": i, "text": text} for i, text in enumerate(texts)])
    rows = embed_dataset(
        dataset, replicas=1, batch_size=64, model_config=ModelConfig(model=str(directory))
    ).take_all()
    rows.sort(key=lambda row: row["id"])
    vectors = np.stack([np.asarray(row["embedding"], np.float32) for row in rows])
    np.testing.assert_allclose(vectors, model2vec_reference(directory, texts), atol=1e-6)
