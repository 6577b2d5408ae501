"""`huggingface_hub`'s `InferenceClient(base_url)` against real servers, as it talks to a
text-embeddings-inference endpoint: feature extraction and sentence similarity on the bundled
embedding model, text classification on a classifier; each against sentence-transformers or
the model's own logits."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from huggingface_hub import InferenceClient

from tests.e2e.harness import running_server
from tests.reference import FP32_COSINE, assert_close_vectors
from tests.tiny_models import classifier_reference_labels, classifier_reference_probs

pytestmark = pytest.mark.slow  # real server processes

TEXTS = ["The quick brown fox", "jumps over the lazy dog"]


@pytest.fixture(autouse=True)
def online_for_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests run with HF_HUB_OFFLINE=1, which makes `InferenceClient` refuse every URL;
    these talk to servers on 127.0.0.1 only."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)


@pytest.fixture(scope="module")
def client(server_url: str) -> InferenceClient:
    return InferenceClient(base_url=server_url, timeout=120)


def test_feature_extraction(client: InferenceClient, st_model: Any) -> None:
    vectors = client.feature_extraction(TEXTS[0])
    assert vectors.shape == (1, 384)
    assert_close_vectors(vectors, st_model.encode(TEXTS[:1]), FP32_COSINE)
    cut = client.feature_extraction(
        " ".join(["word"] * 400), truncate=True, truncation_direction="left"
    )
    assert cut.shape == (1, 384)


def test_sentence_similarity(client: InferenceClient, st_model: Any) -> None:
    from sentence_transformers.util import cos_sim

    scores = client.sentence_similarity("a fast fox", other_sentences=TEXTS)
    expected = cos_sim(st_model.encode(["a fast fox"]), st_model.encode(TEXTS))[0].numpy()
    np.testing.assert_allclose(scores, expected, atol=1e-5)


@pytest.fixture(scope="module")
def classifier_url(classifier_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    directory = tmp_path_factory.mktemp("classifier-server")
    with running_server(directory, [str(classifier_dir)]) as server:
        yield server.url


def test_text_classification(classifier_url: str, classifier_dir: Path) -> None:
    client = InferenceClient(base_url=classifier_url, timeout=120)
    results = client.text_classification(TEXTS[0])
    probs = classifier_reference_probs(classifier_dir, TEXTS[:1])[0]
    labels = classifier_reference_labels(classifier_dir, TEXTS[:1])
    assert results[0].label == labels[0]
    assert [item.score for item in results] == pytest.approx(sorted(probs, reverse=True), abs=1e-5)
    top = client.text_classification(TEXTS[0], top_k=1)
    assert [item.label for item in top] == labels
