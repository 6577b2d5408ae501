"""How a model's inputs become what its backend runs: each CPU-pool thread's processor of them
(its tokenizer, or an image-text model's processor; its key and how it is built) and the
collate function that lays a batch of them out (padded, packed, or flat for a static table)."""

from __future__ import annotations

from functools import partial

from poolserve.engine.collate import collate, collate_flat
from poolserve.engine.model_backend import Collate
from poolserve.inputs.image_processor import ImageTextProcessor
from poolserve.inputs.tokenizer import TextTokenizer
from poolserve.models.spec import ModelSpec


def processor_key(model: ModelSpec) -> str:
    """The key of each CPU-pool thread's processor of `model`'s inputs (a str caches its
    hash): its tokenizer, and what else decides what a text becomes: an image-text model's
    image processor's folder, a static model's cut by characters (model2vec's)."""
    vision, static = model.layout.vision, model.layout.static
    if vision is not None:
        return f"{vision.directory}\n{model.tokenizer_json}"
    if static is not None and static.chars_per_token:
        return f"cut at {static.chars_per_token} characters a token\n{model.tokenizer_json}"
    return model.tokenizer_json


def collate_for(model: ModelSpec) -> Collate:
    """The model's collate function (padded or packed batches, engine/collate.py; flat ones
    for a static model's table)."""
    if model.layout.static is not None:
        return collate_flat
    return partial(
        collate,
        pad_token_id=model.pad_token_id,
        hidden_size=model.layout.hidden_size,
        max_row_length=model.max_model_len,
    )


def build_processor(model: ModelSpec) -> TextTokenizer:
    """A processor of `model`'s inputs, for one thread (fast tokenizers are not re-entrant)."""
    vision, static = model.layout.vision, model.layout.static
    if vision is not None:
        return ImageTextProcessor(model.tokenizer_json, vision)
    chars = None if static is None else static.chars_per_token
    return TextTokenizer(model.tokenizer_json, chars_per_token=chars)
