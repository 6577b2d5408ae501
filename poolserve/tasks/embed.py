"""The embedding task: texts or token ids in, one vector each out (normalized, sliced); an input
longer than the model's length is refused, cut, or embedded in chunks (tasks/chunking.py), as
the request's `long_input` says."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from poolserve.config import LongInput
from poolserve.engine.context import PoolingParams, ServeContext
from poolserve.engine.work import Parts
from poolserve.errors import InputTooLongError, InvalidRequestError, PayloadTooLargeError
from poolserve.inputs.image_processor import ImageTextProcessor
from poolserve.inputs.images.policy import MediaPolicy
from poolserve.inputs.images.sources import ImageInput, has_images, image_count
from poolserve.inputs.tokenizer import TextTokenizer, TokenizedText
from poolserve.models.kinds import Head
from poolserve.tasks.chat import ChatOptions, Conversation
from poolserve.tasks.chunking import (
    Chunking,
    ChunkPlan,
    Span,
    chunk_vectors,
    combine,
    plan_chunks,
)
from poolserve.tasks.image_inputs import with_images
from poolserve.tasks.input_steps import InputsTask, bound_text, l2_normalize, tokenize_inputs

EmbedInputs = list[str] | list[list[int]] | list[Conversation] | list[str | ImageInput]


@dataclass(frozen=True)
class EmbedRequest:
    """An embedding request as the engine sees it (validated at the edge)."""

    inputs: EmbedInputs
    # Put before each text input (see tasks/prompts.py); None: none.
    prompt: str | None = None
    # What to do with an input longer than the model takes (when truncation is not asked for).
    long_input: LongInput = "error"
    chunking: Chunking = field(default_factory=Chunking)
    # Set when the inputs are conversations, rendered with the model's chat template.
    chat: ChatOptions | None = None
    # Whether the tokenizer adds the model's special tokens around each text (a chat
    # template writes its own: vLLM's add_special_tokens, false for chat).
    add_special_tokens: bool = True
    # What image inputs (`ImageInput`, for an image-text model) may be and come from, and how
    # errors name one: a format of its index ("input {}", Cohere's "images[{}]"), or a chat
    # request's one input where it lies ("messages[1].content[0]").
    media: MediaPolicy = field(default_factory=MediaPolicy)
    image_names: str = "input {}"

    @property
    def chunked(self) -> bool:
        return self.long_input == "chunk" or self.chunking.method == "late"


@dataclass(frozen=True)
class ChunkedEmbeddings:
    """Each input's vector, and its chunks' (split) or spans' (late) vectors and spans."""

    vectors: np.ndarray
    chunks: list[tuple[np.ndarray, tuple[Span, ...]]]


class EmbedTask(InputsTask[EmbedRequest]):
    """Task processor for `/v1/embeddings` and the offline `embed`: float32 vectors."""

    def __init__(
        self, *, max_model_len: int, include_prompt: bool = True, max_input_tokens: int = 32768
    ) -> None:
        super().__init__(max_model_len=max_model_len)
        # False: a prompt's tokens are attended to but not pooled (the Pooling config's
        # include_prompt).
        self.include_prompt = include_prompt
        # The most tokens one input may have when it is chunked (--max-input-tokens).
        self.max_input_tokens = max_input_tokens

    # Whether its answer takes image inputs (the chunked answer's spans are a text's).
    takes_images = True

    def inputs(self, ctx: ServeContext[EmbedRequest]) -> Sequence[object]:
        inputs = ctx.request.inputs
        images = image_count(inputs)
        media = ctx.request.media
        if images > media.max_images:
            raise PayloadTooLargeError(
                f"the request has {images} images, more than the {media.max_images} one request "
                "may have here (--max-images-per-request); split it",
                param="input",
            )
        return inputs

    def preprocess(
        self,
        ctx: ServeContext[EmbedRequest],
        tokenizer: TextTokenizer,
        start: int,
        inputs: Sequence[str] | Sequence[list[int]],
    ) -> Sequence[TokenizedText | Parts]:
        if has_images(inputs):
            return self._with_images(ctx, tokenizer, start, inputs)
        request = ctx.request
        if request.chat is not None:
            inputs = request.chat.render_all(inputs)  # type: ignore[arg-type]
        if request.chunked:
            if ctx.pooling_params.truncate_prompt_tokens is not None:
                raise InvalidRequestError(
                    "truncate_prompt_tokens cuts inputs and chunking embeds them whole; pass "
                    "one of them",
                    param="truncate_prompt_tokens",
                )
            return [
                self._chunked(ctx, tokenizer, start + offset, each)
                for offset, each in enumerate[str | list[int]](inputs)
            ]
        prompt = request.prompt
        truncate = ctx.pooling_params.truncate_prompt_tokens
        if truncate is None and request.long_input == "truncate":
            truncate = self.max_model_len
        try:
            tokenized = tokenize_inputs(
                tokenizer,
                inputs,
                start,
                truncate=truncate,
                max_model_len=self.max_model_len,
                head=self.head,
                prompt=prompt,
                side=ctx.pooling_params.truncation_side,
                add_special_tokens=request.add_special_tokens,
            )
        except InputTooLongError as error:
            raise error.chunkable() from None
        if prompt and not self.include_prompt and inputs and isinstance(inputs[0], str):
            # As sentence-transformers: the tokenized prompt without its closing [SEP] ([CLS]
            # and the prompt's words) is left out of the mean.
            prompt_length = len(tokenizer.encode_batch([prompt], truncate_to=None)[0]) - 1
            tokenized = [replace(text, pool_from=prompt_length) for text in tokenized]
        return tokenized

    def _with_images(
        self,
        ctx: ServeContext[EmbedRequest],
        processor: TextTokenizer,
        start: int,
        inputs: Sequence[object],
    ) -> list[TokenizedText | Parts]:
        """Images prepared one by one (CPU pool), each run of texts among them as texts are."""
        if not self.takes_images and isinstance(processor, ImageTextProcessor):
            first = next(i for i, each in enumerate(inputs) if isinstance(each, ImageInput))
            raise InvalidRequestError(
                f"input {start + first} is an image: chunks and spans are a text's "
                "(return_chunks, late chunking); embed images without them",
                param="input",
            )
        return with_images(
            processor,
            start,
            inputs,
            media=ctx.request.media,
            name=ctx.request.image_names.format,
            texts=lambda at, run: self.preprocess(ctx, processor, at, run),
        )

    def _chunked(
        self,
        ctx: ServeContext[EmbedRequest],
        tokenizer: TextTokenizer,
        index: int,
        text: str | list[int],
    ) -> TokenizedText | Parts:
        """One input planned as chunks (tasks/chunking.py); the plan kept for postprocess."""
        request = ctx.request
        where = f"input {index}"
        before: list[int] = []
        after: list[int] = []
        prompt_ids: list[int] = []
        offsets: list[tuple[int, int]] | None = None
        words: list[int | None] | None = None
        if isinstance(text, str):
            # Empty inputs refused; a huge one refused from its first tokens, not all of them.
            try:
                bound_text(tokenizer, text, where, self.max_input_tokens, False, index)
            except InputTooLongError:
                raise self._too_long(where, f"more than {self.max_input_tokens}", index) from None
            prompt = request.prompt or ""
            encoding = tokenizer.encodings([prompt + text], add_special_tokens=False)[0]
            kept = sum(1 for _, end in encoding.offsets if end <= len(prompt)) if prompt else 0
            prompt_ids, content = encoding.ids[:kept], encoding.ids[kept:]
            offsets = [(a - len(prompt), b - len(prompt)) for a, b in encoding.offsets[kept:]]
            words = encoding.word_ids[kept:]
            if request.add_special_tokens:
                before, after = tokenizer.special_frame()
        else:
            tokenizer.check_token_ids(text, param="input")
            content = list(text)
        if len(content) > self.max_input_tokens:
            raise self._too_long(where, str(len(content)), index)
        first_row = len(before) + len(prompt_ids)
        room = self.max_model_len - first_row - len(after)
        if room < 1:
            raise InvalidRequestError(
                f"the prompt fills the model's {self.max_model_len} tokens; nothing of the "
                "input fits beside it (use a shorter prompt)",
                param="prompt",
            )
        plan = plan_chunks(len(content), offsets, room, request.chunking, first_row, words)
        ctx.item_data[index] = plan
        head: Head = "token_embed" if plan.late else "embed"
        pool_from = first_row if prompt_ids and not self.include_prompt else 0
        parts = [
            TokenizedText(
                [*before, *prompt_ids, *content[start:end], *after], None, head, pool_from=pool_from
            )
            for start, end in plan.windows
        ]
        return parts[0] if len(parts) == 1 else Parts(tuple(parts))

    def _too_long(self, where: str, tokens: str, index: int) -> InputTooLongError:
        return InputTooLongError(
            where,
            f"has {tokens} tokens, but one input may have at most {self.max_input_tokens} here "
            "(the server's --max-input-tokens), chunked or not",
            cut_with='`long_input: "truncate"`',
            param="input",
            index=index,
        )

    def postprocess(self, ctx: ServeContext[EmbedRequest], outputs: list[np.ndarray]) -> np.ndarray:
        if ctx.request.chunked:
            outputs = [
                each if plan is None else combine(plan, each)
                for each, plan in zip(outputs, self._plans(ctx, len(outputs)), strict=True)
            ]
        return finish_vectors(stacked(outputs), ctx.pooling_params)

    @staticmethod
    def _plans(ctx: ServeContext[EmbedRequest], count: int) -> list[ChunkPlan | None]:
        """Each input's chunk plan (None: an input the Python API skipped as too long)."""
        plans = [ctx.item_data.get(index) for index in range(count)]
        return [plan if isinstance(plan, ChunkPlan) else None for plan in plans]


class ChunkedEmbedTask(EmbedTask):
    """The embedding task answering with each input's chunks (or late spans) too."""

    takes_images = False

    def postprocess(  # type: ignore[override]
        self, ctx: ServeContext[EmbedRequest], outputs: list[np.ndarray]
    ) -> ChunkedEmbeddings:
        vectors = super().postprocess(ctx, outputs)
        chunks = []
        for each, plan in zip(outputs, self._plans(ctx, len(outputs)), strict=True):
            assert plan is not None  # every input of a chunked request is planned
            chunks.append(
                (finish_vectors(chunk_vectors(plan, each), ctx.pooling_params), plan.spans)
            )
        return ChunkedEmbeddings(vectors, chunks)


def stacked(vectors: list[np.ndarray]) -> np.ndarray:
    """The vectors as the rows of one array: `np.stack`'s array (np.array makes the same of
    equal rows in a fifth of the time; rows of unequal lengths are a ValueError from either),
    and its error for none."""
    return np.array(vectors) if vectors else np.stack(vectors)


def finish_vectors(vectors: np.ndarray, params: PoolingParams) -> np.ndarray:
    """Pooled vectors as a request asked for them: float32, sliced, normalized."""
    vectors = vectors.astype(np.float32, copy=False)
    if params.dimensions is not None:
        vectors = vectors[:, : params.dimensions]
    if params.normalize:
        vectors = l2_normalize(vectors)
    return np.ascontiguousarray(vectors)
