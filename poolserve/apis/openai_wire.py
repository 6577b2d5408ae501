"""OpenAI's embeddings API on the wire: its request bodies (with vLLM's options and chat-style
messages), validated at the edge, and its answer, documented and encoded (float or base64, any
embedding type, chunks where asked)."""

from __future__ import annotations

import base64
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field, StrictBool, StrictInt, StrictStr, field_validator

from poolserve.apis.answer_docs import Documented, ListEnvelope
from poolserve.apis.envelope import EncodingFormat, list_body
from poolserve.apis.request_bodies import (
    IMAGE_SOURCE,
    InputRequest,
    Part,
    StrictModel,
    TokenIds,
    parts_of,
)
from poolserve.engine.context import ServeContext
from poolserve.inputs.images.sources import ImageInput
from poolserve.tasks.chunking import Chunking
from poolserve.tasks.embed import ChunkedEmbeddings
from poolserve.tasks.quantize import EmbedDType, as_dtype, as_floats

Endianness = Literal["little", "big"]


class ChunkingOptions(StrictModel):
    """How long inputs are chunked (docs: Long inputs)."""

    method: Literal["split", "late"] = Field(
        "split",
        description="split: each chunk pooled on its own, the input's vector their token-weighted "
        "mean; late: one pass over the whole document, one vector per span, mean-pooled from its "
        "tokens' vectors",
    )
    size: Annotated[StrictInt, Field(ge=1)] | None = Field(
        None,
        description="the input's own tokens per chunk (split; default: as many as fit) or per "
        "span (late)",
    )
    overlap: Annotated[StrictInt, Field(ge=0)] | None = Field(
        None,
        description="tokens neighbouring chunks share (split; default 0), or windows share "
        "where a late-chunked document exceeds the model (default a quarter of a window)",
    )
    spans: list[tuple[StrictInt, StrictInt]] | None = Field(
        None, description="late: the spans to embed, as [start, end) character ranges of the text"
    )

    def chunking(self) -> Chunking:
        spans = None if self.spans is None else tuple(self.spans)
        return Chunking(self.method, self.size, self.overlap, spans)


class ImageItem(StrictModel):
    """An image among the inputs (image-text models: CLIP, SigLIP)."""

    image: StrictStr = Field(description=IMAGE_SOURCE)


EmbeddingInput = StrictStr | ImageItem | list[StrictStr | ImageItem] | TokenIds | list[TokenIds]


class EmbeddingRequest(InputRequest):
    """OpenAI `POST /v1/embeddings`, plus vLLM's pooling options and poolserve's chunking."""

    # Texts and images; the base class's field holds texts and token ids only.
    input: EmbeddingInput = Field(  # type: ignore[assignment]
        description="a string, an array of strings, an array of token ids, or an array of "
        'arrays of token ids (an image-text model\'s images as {"image": ...} among the strings)'
    )

    encoding_format: Literal["float", "base64"] = "float"
    dimensions: StrictInt | None = None
    normalize: StrictBool | None = None
    prompt_name: StrictStr | None = Field(
        None,
        description="one of the model's prompts (GET /v1/models lists them), put before each "
        "text; default: the model's default prompt",
    )
    prompt: StrictStr | None = Field(
        None, description="a prompt's text, put before each text (instead of prompt_name)"
    )
    embed_dtype: Literal["float32", "float16", "bfloat16", "int8", "uint8", "binary", "ubinary"] = (
        Field(
            "float32",
            description="the numbers' type (docs: Routes by API family, compact embedding "
            "types); with base64, the bytes' type (the OpenAI client decodes float32 only)",
        )
    )
    endianness: Literal["little", "big"] = Field(
        "little", description="byte order of base64 values wider than a byte"
    )

    long_input: Literal["truncate", "chunk", "error"] | None = Field(
        None,
        description="what an input longer than the model's length gets: a 400 (error), cut "
        "(truncate), or embedded in chunks (chunk); default: the server's --long-input",
    )
    chunking: ChunkingOptions | None = Field(
        None, description="how long inputs are chunked (implies long_input chunk)"
    )
    return_chunks: StrictBool = Field(
        False,
        description="answer each input's chunks too: their vectors, token and character spans "
        "(implies long_input chunk)",
    )

    def wants_normalize(self) -> bool | None:
        """`normalize`, or vLLM's `use_activation`; None leaves it to the model's config."""
        return self.normalize if self.normalize is not None else self.use_activation

    def inputs(self) -> list[Any]:
        """The inputs as a list: texts and images (`ImageInput`), or token-id lists."""
        value = self.input
        if isinstance(value, ImageItem):
            return [ImageInput(value.image)]
        # (by type, in C: isinstance runs pydantic's Python check on every text)
        if isinstance(value, list) and ImageItem in set(map(type, value)):
            return [ImageInput(e.image) if isinstance(e, ImageItem) else e for e in value]
        return super().inputs()

    def input_count(self) -> int:
        return 1 if isinstance(self.input, ImageItem) else super().input_count()


class ChatMessage(StrictModel):
    role: StrictStr
    content: StrictStr | list[Part]
    name: StrictStr | None = None

    def parts(self) -> list[str | ImageInput]:
        """Its content: texts and images, in order."""
        if isinstance(self.content, str):
            return [self.content]
        return parts_of(self.content)

    def as_dict(self) -> dict[str, Any]:
        """As a chat template reads it: text parts joined by new lines (vLLM's string form)."""
        content = "\n".join(part for part in self.parts() if isinstance(part, str))
        message = {"role": self.role, "content": content}
        return message if self.name is None else {**message, "name": self.name}


class ChatEmbeddingRequest(EmbeddingRequest):
    """vLLM's chat-style `POST /v1/embeddings`: a conversation (`messages`) instead of `input`,
    rendered with the model's chat template and embedded as one text."""

    input: None = Field(None, description="not with messages")  # type: ignore[assignment]
    messages: list[ChatMessage] = Field(min_length=1, description="the conversation to embed")
    add_generation_prompt: StrictBool = Field(
        False, description="end with the template's opening of an assistant turn"
    )
    continue_final_message: StrictBool = Field(
        False, description="leave the last message open (no end-of-turn marker)"
    )
    add_special_tokens: StrictBool = Field(
        False,
        description="add the tokenizer's special tokens around the rendered text as well (the "
        "template writes its own)",
    )
    chat_template_kwargs: dict[str, Any] | None = Field(
        None, description="more variables for the chat template"
    )

    @field_validator("input", mode="before")
    @classmethod
    def _not_both(cls, value: Any) -> None:
        if value is not None:
            raise ValueError(
                "a request embeds `input` or `messages` (a conversation), not both; send one"
            )
        return None


class EmbeddingChunk(Documented):
    embedding: list[float] | str
    tokens: tuple[int, int] = Field(
        description="the input's own tokens it holds, [start, end) (no prompt or special token)"
    )
    chars: tuple[int, int] | None = Field(
        description="its characters in the input, [start, end); null for token ids"
    )


class EmbeddingItem(Documented):
    object: Literal["embedding"]
    index: int
    embedding: list[float] | str = Field(
        description="floats, or with encoding_format base64 little-endian float32 bytes"
    )
    chunks: list[EmbeddingChunk] | None = Field(
        None, description="with return_chunks or late chunking: the input's chunks (or spans)"
    )


class EmbeddingResponse(ListEnvelope):
    data: list[EmbeddingItem]


def embeddings_body(
    ctx: ServeContext[Any],
    vectors: np.ndarray,
    *,
    encoding_format: EncodingFormat,
    embed_dtype: EmbedDType = "float32",
    endianness: Endianness = "little",
) -> bytes:
    """Each vector as numbers, or as base64 of its bytes in `embed_dtype` (vLLM's option;
    the OpenAI client decodes float32 only, see docs/apis.md)."""
    embeddings = encoded_rows(vectors, encoding_format, embed_dtype, endianness)
    data = [
        {"object": "embedding", "index": index, "embedding": embedding}
        for index, embedding in enumerate(embeddings)
    ]
    return list_body(ctx, "embd", data)


def encoded_rows(
    vectors: np.ndarray,
    encoding_format: EncodingFormat,
    embed_dtype: EmbedDType,
    endianness: Endianness,
) -> list[object]:
    typed = as_dtype(vectors, embed_dtype)
    if encoding_format == "base64":
        raw = typed.astype(typed.dtype.newbyteorder(endianness), copy=False)
        return [base64.b64encode(np.ascontiguousarray(row).tobytes()).decode() for row in raw]
    numbers = as_floats(typed, embed_dtype)
    if embed_dtype in ("float16", "bfloat16"):
        # As float64, JSON holds each value exactly (float32's shortest form would not).
        numbers = numbers.astype(np.float64)
    return list(numbers)


def chunked_embeddings_body(
    ctx: ServeContext[Any],
    result: ChunkedEmbeddings,
    *,
    encoding_format: EncodingFormat,
    embed_dtype: EmbedDType = "float32",
    endianness: Endianness = "little",
) -> bytes:
    """`embeddings_body` with each input's chunks (or late spans) beside its vector."""
    embeddings = encoded_rows(result.vectors, encoding_format, embed_dtype, endianness)
    data = []
    for index, (embedding, (vectors, spans)) in enumerate(
        zip(embeddings, result.chunks, strict=True)
    ):
        rows = encoded_rows(vectors, encoding_format, embed_dtype, endianness)
        chunks = [
            {"embedding": row, "tokens": span.tokens, "chars": span.chars}
            for row, span in zip(rows, spans, strict=True)
        ]
        data.append(
            {"object": "embedding", "index": index, "embedding": embedding, "chunks": chunks}
        )
    return list_body(ctx, "embd", data)


# -- the endpoint --------------------------------------------------------------------------------
