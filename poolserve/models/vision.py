"""What an image-text checkpoint (CLIP, SigLIP) says about its images and its text tower, read
before any weight is loaded: its family, image size and patches, the width of the space both
towers embed into, and how its texts are padded.

Detected from config.json's `model_type` ("clip", "siglip": `CLIPModel`, `SiglipModel`, and
SigLIP 2's fixed-resolution checkpoints, which are `SiglipModel`s with a Gemma tokenizer). The
image processor's settings (resize, crop, normalization) stay in preprocessor_config.json, read
by transformers' own image processor (inputs/image_processor.py).

SigLIP's text tower pools its last position, whatever token is there: it was trained on texts
padded to their full length (64 tokens), and transformers' model card pads them so
(`padding="max_length"`); a text padded less gets another vector. So its texts run padded to
`text_pad_to` as the checkpoint's tokenizer pads: on its side (tokenizer_config.json's
`padding_side`, else its class's: Gemma's, in SigLIP 2, pads on the left), the padding masked
where the tokenizer returns an attention mask (Gemma's) and attended to where it returns none
(SigLIP's own `SiglipTokenizer`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from poolserve.errors import ModelLoadError

ImageFamily = Literal["clip", "siglip"]
FAMILIES: dict[str, ImageFamily] = {"clip": "clip", "siglip": "siglip"}
PREPROCESSOR_FILE = "preprocessor_config.json"
# Tokenizer classes that return no attention mask (their padding is attended to).
_UNMASKED_TOKENIZERS = ("SiglipTokenizer",)


@dataclass(frozen=True)
class VisionLayout:
    """An image-text model's image side, and what its text side needs beyond a tokenizer."""

    family: ImageFamily
    # Where preprocessor_config.json is (the transformers directory).
    directory: Path
    image_size: int
    patch_size: int
    # The width of the space text and image vectors share.
    embedding_dim: int
    # SigLIP: every text padded to this many tokens (see the module's docstring); None: no.
    text_pad_to: int | None = None
    # Whether that padding is masked out of the attention, and on which side it goes.
    mask_text_padding: bool = True
    text_padding_side: Literal["right", "left"] = "right"

    @property
    def image_tokens(self) -> int:
        """The vision tower's sequence per image: its patches, and CLIP's class token."""
        patches = (self.image_size // self.patch_size) ** 2
        return patches + (1 if self.family == "clip" else 0)

    @property
    def pixel_floats(self) -> int:
        """The floats of one prepared image (3 × size × size)."""
        return 3 * self.image_size * self.image_size


def image_family(hf_config: dict[str, Any]) -> ImageFamily | None:
    """The image-text family of a config.json, or None for a text model."""
    return FAMILIES.get(str(hf_config.get("model_type", "")))


def read_vision(directory: Path, config: Any, family: ImageFamily) -> VisionLayout:
    """The image side of the checkpoint in `directory` (its config as transformers reads it)."""
    if not (directory / PREPROCESSOR_FILE).is_file():
        raise ModelLoadError(
            f"{directory} is a {family.upper()} model without {PREPROCESSOR_FILE}: it does not "
            "say how its images are resized and normalized (copy the file from the checkpoint "
            "it came from)"
        )
    vision = config.vision_config
    text = config.text_config
    if family == "clip":
        dim = int(config.projection_dim)
        pad_to = None
    else:
        dim = int(text.hidden_size)
        pad_to = int(text.max_position_embeddings)
    return VisionLayout(
        family=family,
        directory=directory,
        image_size=int(vision.image_size),
        patch_size=int(vision.patch_size),
        embedding_dim=dim,
        text_pad_to=pad_to,
        mask_text_padding=_tokenizer_class(directory) not in _UNMASKED_TOKENIZERS,
        text_padding_side=_padding_side(directory),
    )


def _tokenizer_config(directory: Path) -> dict[str, Any]:
    path = directory / "tokenizer_config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}


def _tokenizer_class(directory: Path) -> str:
    return str(_tokenizer_config(directory).get("tokenizer_class", ""))


def _padding_side(directory: Path) -> Literal["right", "left"]:
    """The side the tokenizer pads: its config's, else its transformers class's default."""
    side = _tokenizer_config(directory).get("padding_side")
    if side is None:
        import transformers

        try:
            side = getattr(
                getattr(transformers, _tokenizer_class(directory), None), "padding_side", None
            )
        except ImportError:  # a class whose backend is not installed (its default is unknown)
            side = None
    return "left" if side == "left" else "right"


def pad_token(directory: Path) -> str | None:
    """The tokenizer's padding token (tokenizer_config.json, else special_tokens_map.json)."""
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        path = directory / name
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        token = config.get("pad_token") if isinstance(config, dict) else None
        if isinstance(token, dict):
            token = token.get("content")
        if isinstance(token, str):
            return token
    return None
