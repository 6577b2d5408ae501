"""The clients people already have, sending images to a real server of an image-text model (the
tiny CLIP): the OpenAI SDK (its default base64 answers, decoded by the SDK) with `{"image": ...}`
inputs, and Cohere's SDK with `images`; vectors against transformers' `get_image_features`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import cohere
import numpy as np
import openai
import pytest

from tests.e2e.harness import Server, running_server
from tests.reference import assert_close_vectors
from tests.vision_zoo import CAPTIONS, data_uri, image_features, sample_images, text_features

pytestmark = pytest.mark.slow  # a real server process


@pytest.fixture(scope="module")
def clip_server(tmp_path_factory: pytest.TempPathFactory, clip_dir: Path) -> Iterator[Server]:
    with running_server(tmp_path_factory.mktemp("image-clients"), [str(clip_dir)]) as started:
        yield started


def unit(vectors: np.ndarray) -> np.ndarray:
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_the_openai_client_embeds_images_among_texts(clip_server: Server, clip_dir: Path) -> None:
    images = sample_images()[:3]
    client = openai.OpenAI(base_url=f"{clip_server.url}/v1", api_key="unused", timeout=120)
    inputs: list[object] = [{"image": data_uri(image)} for image in images] + [CAPTIONS[0]]
    response = client.embeddings.create(model="clip", input=inputs)  # type: ignore[arg-type]
    vectors = np.array([item.embedding for item in response.data], dtype=np.float32)
    assert_close_vectors(vectors[:3], image_features(clip_dir, images))
    assert_close_vectors(vectors[3:], text_features(clip_dir, CAPTIONS[:1]))
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_the_cohere_client_embeds_images(clip_server: Server, clip_dir: Path) -> None:
    images = sample_images()[:2]
    client = cohere.ClientV2(base_url=clip_server.url, api_key="unused", timeout=120)
    response = client.embed(
        model="clip",
        input_type="image",
        images=[data_uri(image) for image in images],
        embedding_types=["float"],
    )
    assert response.embeddings.float_ is not None
    vectors = np.array(response.embeddings.float_, dtype=np.float32)
    assert_close_vectors(vectors, unit(image_features(clip_dir, images)))
    with pytest.raises(cohere.errors.BadRequestError) as caught:
        client.embed(model="clip", input_type="image", images=["data:image/png;base64,AAAA"])
    assert "images[0] is not an image" in str(caught.value.body)
