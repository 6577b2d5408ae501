"""Batching never changes an answer: inputs of 3, 7 and 256 tokens (1, 5 and 254 of their own)
in one request, packed into rows (the default where the model packs), cut into length buckets
or run as one batch padded to 256, equal each input run alone and the independent reference,
for every kind of output: vectors (sentence-transformers, in float32 and bfloat16),
cross-encoder pairs with token type ids (packed: the head reads each pair's first token), ColBERT
token vectors and SPLADE weights (float64 transformers)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from poolserve import Engine, EngineConfig, ModelConfig
from tests.reference import (
    BF16_COSINE,
    FP32_COSINE,
    assert_close_vectors,
    st_encode,
    text_with_tokens,
)
from tests.tiny_models import (
    colbert_reference_embeddings,
    cross_encoder_reference_scores,
    splade_reference,
)

# Packed rows (the default), and padded batches: cut at the scheduler's default tolerance, or
# one batch padded to its longest input.
LAYOUTS: dict[str, EngineConfig] = {
    "packed": EngineConfig(runners=1),
    "buckets": EngineConfig(runners=1, packing="off", bucket_padding_tokens=32),
    "one padded batch": EngineConfig(runners=1, packing="off", bucket_padding_tokens=None),
}


@pytest.fixture(scope="module")
def mixed(hf_tokenizer: Any) -> list[str]:
    return [text_with_tokens(hf_tokenizer, n, seed) for seed, n in enumerate((3, 7, 256))]


@pytest.fixture(scope="module", params=list(LAYOUTS), ids=list(LAYOUTS))
def layout(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def engine_for(directory: Path | None, layout: str, dtype: str = "float32") -> Engine:
    # One runner: a request's items are all waiting when it asks for a batch.
    engine = Engine(
        model_config=ModelConfig(model=None if directory is None else str(directory), dtype=dtype),
        engine_config=LAYOUTS[layout],
    )
    packed = engine.core.packed_heads
    assert bool(packed) == (layout == "packed"), packed
    return engine


@pytest.fixture(scope="module")
def minilm(layout: str) -> Iterator[Engine]:
    with engine_for(None, layout) as engine:
        yield engine


def test_embeddings(minilm: Engine, mixed: list[str], st_model: Any) -> None:
    together = minilm.embed(mixed)
    alone = np.concatenate([minilm.embed([text]) for text in mixed])
    np.testing.assert_allclose(together, alone, atol=1e-6)
    assert_close_vectors(together, st_encode(st_model, mixed), FP32_COSINE)


@pytest.mark.parametrize("layout", ["packed", "buckets"])
def test_bfloat16_embeddings(layout: str, mixed: list[str], st_model: Any) -> None:
    with engine_for(None, layout, dtype="bfloat16") as engine:
        together = engine.embed(mixed)
        alone = np.concatenate([engine.embed([text]) for text in mixed])
    assert_close_vectors(together, alone, BF16_COSINE)
    assert_close_vectors(together, st_encode(st_model, mixed), BF16_COSINE)


def test_cross_encoder_pairs(cross_encoder_dir: Path, mixed: list[str], layout: str) -> None:
    query = mixed[1]
    with engine_for(cross_encoder_dir, layout) as engine:
        together = engine.score(query, mixed)
        alone = np.array([engine.score(query, [document])[0] for document in mixed])
    np.testing.assert_allclose(together, alone, atol=1e-6)
    expected = cross_encoder_reference_scores(cross_encoder_dir, [(query, d) for d in mixed])
    np.testing.assert_allclose(together, expected, atol=1e-5)


def test_colbert_token_vectors(
    colbert_dir: Path, hf_tokenizer: Any, mixed: list[str], layout: str
) -> None:
    """Documents' token vectors, and MaxSim against PyLate's (its documents stop at 179
    tokens, so the long one has 150)."""
    documents = [*mixed[:2], text_with_tokens(hf_tokenizer, 150, 5)]
    with engine_for(colbert_dir, layout) as engine:
        together = engine.pool(documents, task="token_embed")
        alone = [engine.pool([document], task="token_embed")[0] for document in documents]
        scores = engine.score(documents[1], documents)
    for got, single in zip(together, alone, strict=True):
        np.testing.assert_allclose(got, single, atol=1e-6)
    (query,) = colbert_reference_embeddings(colbert_dir, [documents[1]], is_query=True)
    reference = colbert_reference_embeddings(colbert_dir, documents, is_query=False)
    expected = [float((query @ document.T).max(axis=1).sum()) for document in reference]
    np.testing.assert_allclose(scores, expected, rtol=1e-5)


def test_splade_weights(splade_dir: Path, mixed: list[str], layout: str) -> None:
    with engine_for(splade_dir, layout) as engine:
        together = engine.embed_sparse(mixed)
        alone = [engine.embed_sparse([text])[0] for text in mixed]
    references = splade_reference(splade_dir, mixed)
    for got, single, expected in zip(together, alone, references, strict=True):
        # A weight this close to zero may be on either side of it: compare over every term.
        keys = sorted(set(got) | set(single) | set(expected))
        assert len(keys) > 10
        for other in (single, expected):
            np.testing.assert_allclose(
                [got.get(k, 0.0) for k in keys],
                [other.get(k, 0.0) for k in keys],
                rtol=1e-4,
                atol=1e-5,
            )
