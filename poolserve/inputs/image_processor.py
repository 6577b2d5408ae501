"""An image as the model's input: decoded (inputs/images/decode.py) and prepared by the model's own
image processor (transformers' PIL-backed one: resize, crop, rescale, normalize exactly as
transformers does for `get_image_features`), into a work item's payload (`ImagePayload`).

`ImageTextProcessor` is one CPU-pool thread's processor of an image-text model's inputs: the
model's tokenizer (it is a `TextTokenizer`, so every text task runs on it unchanged) and its image
processor. An image costs the vision tower's sequence (patches and class token) in a batch's
token budget, and holds the bytes of its pixels and its output (which the server's admission
prices in its own units).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from poolserve.errors import PayloadTooLargeError
from poolserve.inputs.images.decode import decode_image
from poolserve.inputs.images.policy import MediaPolicy
from poolserve.inputs.images.sources import ImageInput, image_bytes
from poolserve.inputs.tokenizer import TextTokenizer
from poolserve.models.kinds import Head
from poolserve.models.vision import VisionLayout


@dataclass(frozen=True, eq=False)
class ImagePayload:
    """One prepared image: float32 pixels [3, size, size] (`work.Payload`)."""

    pixel_values: np.ndarray
    # The vision tower's tokens: what it weighs in a batch's budget.
    cost: int
    # The bytes its pixels and its output hold.
    held_bytes: int
    head: Head = "image_embed"

    def cache_key(self) -> tuple[bytes, int]:
        """A digest of the pixels the model computes on (the result cache's key)."""
        digest = hashlib.blake2b(self.pixel_values.tobytes(), digest_size=32).digest()
        return b"image:" + digest, len(digest) + 6


def image_held_bytes(vision: VisionLayout) -> int:
    """The bytes one prepared image holds: its float32 pixels and its output vector."""
    return 4 * (vision.pixel_floats + vision.embedding_dim)


def blank_image(vision: VisionLayout) -> ImagePayload:
    """A black image's payload (warm-up batches)."""
    size = vision.image_size
    pixels = np.zeros((3, size, size), dtype=np.float32)
    return ImagePayload(pixels, vision.image_tokens, image_held_bytes(vision))


class ImageTextProcessor(TextTokenizer):
    """One thread's tokenizer and image processor of an image-text model."""

    def __init__(self, tokenizer_json: str, vision: VisionLayout) -> None:
        super().__init__(tokenizer_json)
        from transformers import AutoImageProcessor

        self.vision = vision
        load: Any = AutoImageProcessor.from_pretrained
        self._images: Any = load(str(vision.directory), backend="pil")
        size = getattr(self._images, "size", None)
        self._shortest_edge: int | None = getattr(size, "shortest_edge", None)
        self._held_bytes = image_held_bytes(vision)

    def image(self, image: ImageInput, where: str, policy: MediaPolicy, param: str) -> ImagePayload:
        """The payload of one image input; a 400 or 413 naming `where` if it cannot be one."""
        data = image_bytes(image, where, policy, param)
        picture = decode_image(
            data, where, policy, param, lambda size: self._check_resize(size, where, policy, param)
        )
        pixels = self._images(images=[picture], return_tensors="np")["pixel_values"][0]
        return ImagePayload(
            np.ascontiguousarray(pixels, dtype=np.float32),
            self.vision.image_tokens,
            self._held_bytes,
        )

    def _check_resize(
        self, size: tuple[int, int], where: str, policy: MediaPolicy, param: str
    ) -> None:
        """A processor that resizes the shortest edge (CLIP's) first makes an image of the same
        shape: a 1 × 100,000 strip would grow to 224 × 22,400,000 pixels before its crop."""
        edge = self._shortest_edge
        if edge is None:
            return
        short, long = sorted(size)
        resized = edge * math.ceil(long * edge / short)
        if resized > policy.max_image_pixels:
            raise PayloadTooLargeError(
                f"{where} is {size[0]} × {size[1]} pixels: resized to {edge} on its short side "
                f"it would have {resized} pixels, more than --max-image-pixels "
                f"{policy.max_image_pixels}; crop it nearer to a square",
                param=param,
            )
