"""A bulk job's task (`poolserve embed`, Ray's actors): embeddings with each input's token
count, an input too long for the model (or an image that cannot be read) left out and named
rather than failing the part (`Engine.embed_counted_later` runs it)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from poolserve.engine.context import ServeContext
from poolserve.engine.work import Parts
from poolserve.errors import InputTooLongError, InvalidRequestError, PayloadTooLargeError
from poolserve.inputs.image_processor import ImageTextProcessor, blank_image
from poolserve.inputs.images.sources import ImageInput
from poolserve.inputs.tokenizer import TextTokenizer, TokenizedText
from poolserve.tasks.embed import EmbedRequest, EmbedTask


@dataclass(frozen=True)
class CountedEmbeddings:
    """`Engine.embed_counted_later`'s result: the vectors and token counts of the texts
    embedded, in order, and the texts left out as too long (by index in the call's texts,
    with why: "has more than 256 tokens ...")."""

    vectors: np.ndarray
    tokens: list[int]
    too_long: dict[int, str] = field(default_factory=dict)
    # Images left out as unreadable (damaged, not an image, too large), with why.
    unreadable: dict[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _TooLong:
    """An input left out as too long (in `ServeContext.item_data`)."""

    detail: str


@dataclass(frozen=True)
class _Unreadable:
    """An image left out as unreadable (in `ServeContext.item_data`)."""

    detail: str


class CountedEmbed:
    """The embed task whose result also carries each input's token count; with
    `skip_too_long`, an input too long for the model is left out (a two-token placeholder
    runs in its place), and an image that cannot be read (a black image in its place), instead
    of failing the request."""

    def __init__(self, embed: EmbedTask, *, skip_too_long: bool = False) -> None:
        self._embed = embed
        self._skip_too_long = skip_too_long

    def inputs(self, ctx: ServeContext[EmbedRequest]) -> Sequence[Any]:
        return self._embed.inputs(ctx)

    def preprocess(
        self,
        ctx: ServeContext[EmbedRequest],
        tokenizer: TextTokenizer,
        start: int,
        inputs: Sequence[str] | Sequence[list[int]],
    ) -> Sequence[TokenizedText | Parts]:
        try:
            return self._embed.preprocess(ctx, tokenizer, start, inputs)
        except (InputTooLongError, InvalidRequestError, PayloadTooLargeError):
            if not self._skip_too_long:
                raise
        # This chunk holds an input too long (or an image that cannot be read): one at a time,
        # to find which.
        items: list[Any] = []
        for offset in range(len(inputs)):
            try:
                items += self._embed.preprocess(ctx, tokenizer, start + offset, inputs[offset:][:1])
            except InputTooLongError as exc:
                ctx.item_data[start + offset] = _TooLong(exc.detail)
                special = tokenizer.encode_batch([""], truncate_to=None)[0]
                items.append(TokenizedText(special, None, self._embed.head_for(ctx)))
            except (InvalidRequestError, PayloadTooLargeError) as exc:
                if not isinstance(inputs[offset], ImageInput) or not isinstance(
                    tokenizer, ImageTextProcessor
                ):
                    raise  # a text's error, or images sent to a text model: the call's
                # Its row is named by the job: "the image", not its place in this call.
                detail = exc.message.replace(f"input {start + offset}", "the image", 1)
                ctx.item_data[start + offset] = _Unreadable(detail)
                items.append(blank_image(tokenizer.vision))
        return items

    def postprocess(
        self, ctx: ServeContext[EmbedRequest], outputs: list[np.ndarray]
    ) -> CountedEmbeddings:
        vectors = self._embed.postprocess(ctx, outputs)
        data = ctx.item_data
        too_long = {i: d.detail for i, d in data.items() if isinstance(d, _TooLong)}
        unreadable = {i: d.detail for i, d in data.items() if isinstance(d, _Unreadable)}
        if not too_long and not unreadable:
            return CountedEmbeddings(vectors, list(ctx.input_tokens))
        kept = [i for i in range(len(outputs)) if i not in too_long and i not in unreadable]
        tokens = [ctx.input_tokens[i] for i in kept]
        kept_vectors = np.ascontiguousarray(vectors[kept])
        return CountedEmbeddings(kept_vectors, tokens, too_long, unreadable)
