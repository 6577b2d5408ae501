"""Inputs that mix texts and images (an image-text model's): each image prepared by the
thread's image processor, each run of texts between them by the task's own text path, in order.
The one rule every task with image inputs shares (embeddings, scores, rerank)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

from poolserve.errors import InvalidRequestError
from poolserve.inputs.image_processor import ImageTextProcessor
from poolserve.inputs.images.policy import MediaPolicy
from poolserve.inputs.images.sources import ImageInput
from poolserve.inputs.tokenizer import TextTokenizer
from poolserve.tasks.input_steps import param_of


def with_images(
    processor: TextTokenizer,
    start: int,
    inputs: Sequence[object],
    *,
    media: MediaPolicy,
    name: Callable[[int], str],
    texts: Callable[[int, list[Any]], Sequence[Any]],
) -> list[Any]:
    """The payloads of `inputs` (which begin at `start`): images prepared here, each run of
    other inputs by `texts(its start, the run)`; `name(index)` names an input in errors
    ("input 3", "documents[2]"). A text model's processor takes no image: a 400."""
    if not isinstance(processor, ImageTextProcessor):
        first = next(i for i, each in enumerate(inputs) if isinstance(each, ImageInput))
        raise InvalidRequestError(
            f"{name(start + first)} is an image, and this model embeds text only; send images "
            "to an image-text model (CLIP, SigLIP)",
            param=param_of(name(start + first)),
        )
    prepared: list[Any] = []
    offset = 0
    for is_image, run in itertools.groupby(inputs, lambda each: isinstance(each, ImageInput)):
        group = list(run)
        if is_image:
            names = [name(start + offset + i) for i in range(len(group))]
            prepared += [
                processor.image(image, where, media, param_of(where))
                for where, image in zip(names, group, strict=True)
                if isinstance(image, ImageInput)
            ]
        else:
            prepared += texts(start + offset, group)
        offset += len(group)
    return prepared
