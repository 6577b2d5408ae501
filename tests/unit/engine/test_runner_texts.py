"""Which requests a runner prepares itself, and the texts it primes its tokenizer with
(`pipeline.runner_texts`, decided on the event loop for every request)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np

from poolserve.engine.pipeline import RUNNER_PREPARES_CHARS, runner_texts
from poolserve.inputs.images.sources import ImageInput, has_images, image_count


def engine(chunk: int = 32, prepares: bool = True) -> Any:
    return SimpleNamespace(
        config=SimpleNamespace(tokenize_chunk_size=chunk), runners_prepare=prepares
    )


def test_texts_are_primed_as_sent() -> None:
    texts = ["a first sentence", "a second one"]
    assert runner_texts(engine(), texts) == texts


def test_token_ids_and_conversations_run_on_a_runner_with_only_their_texts_primed() -> None:
    assert runner_texts(engine(), [[101, 2023, 102], [101, 102]]) == []
    assert runner_texts(engine(), ["a text", [101, 102]]) == ["a text"]


def test_what_the_pool_prepares() -> None:
    image = ImageInput("data:image/png;base64,AAAA")
    assert runner_texts(engine(), ["a caption", image]) is None  # images: the pool decodes
    assert runner_texts(engine(chunk=2), ["a", "b", "c"]) is None  # more than one chunk
    assert runner_texts(engine(prepares=False), ["a"]) is None  # an image-text model
    assert runner_texts(engine(), ["x" * (RUNNER_PREPARES_CHARS + 1)]) is None
    assert runner_texts(engine(), ["x" * RUNNER_PREPARES_CHARS]) == ["x" * RUNNER_PREPARES_CHARS]
    # A str subclass (numpy's, from the Python API) is prepared in the pool, which takes it.
    assert runner_texts(engine(), [np.str_("a numpy string")]) is None


def test_images_counted_among_texts() -> None:
    image = ImageInput(b"\x89PNG")
    inputs: list[object] = ["a", image, "b", image]
    assert image_count(inputs) == 2 and has_images(inputs)
    assert image_count(["a", "b"]) == 0 and not has_images(["a", "b"])
