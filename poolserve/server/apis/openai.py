"""OpenAI's embeddings API (`POST /v1/embeddings`), with vLLM's options (`truncate_prompt_tokens`,
`embed_dtype`, `normalize`, prompts): its request schema, its answer (documented and encoded)
and its endpoint."""

from __future__ import annotations

import base64
from dataclasses import replace
from functools import partial
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field, StrictBool, StrictInt, StrictStr

from poolserve.config import LongInput
from poolserve.engine.context import ServeContext
from poolserve.errors import InvalidRequestError
from poolserve.inputs.images.sources import ImageInput
from poolserve.server.apis.envelope import EncodingFormat, list_body
from poolserve.server.protocol import (
    IMAGE_SOURCE,
    InputRequest,
    Part,
    StrictModel,
    TokenIds,
    parts_of,
)
from poolserve.server.schemas import Documented, ListEnvelope
from poolserve.server.template import Call, Endpoint, Inputs, Served, embedders
from poolserve.service.model_service import ModelService
from poolserve.tasks.chat import ChatOptions
from poolserve.tasks.chunking import Chunking
from poolserve.tasks.embed import ChunkedEmbeddings, EmbedRequest
from poolserve.tasks.quantize import EmbedDType, as_dtype, as_floats

Endianness = Literal["little", "big"]


# -- the request ---------------------------------------------------------------------------------


class ChunkingOptions(StrictModel):
    """How long inputs are chunked (README, Long inputs)."""

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
            description="the numbers' type (README, Compact embedding types); with base64, the "
            "bytes' type (the OpenAI client decodes float32 only)",
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
        if isinstance(value, list) and any(isinstance(each, ImageItem) for each in value):
            return [ImageInput(e.image) if isinstance(e, ImageItem) else e for e in value]
        return super().inputs()


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


def _is_chat(data: Any, service: ModelService) -> bool:
    return isinstance(data, dict) and "messages" in data


# -- the answer ----------------------------------------------------------------------------------


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
    the OpenAI client decodes float32 only, see the README)."""
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


def _embeddings(call: Call[EmbeddingRequest]) -> Served:
    wire, service = call.wire, call.service
    prompt = service.tasks.prompts.resolve(wire.prompt_name, wire.prompt)
    return _served(call, EmbedRequest(wire.inputs(), prompt))


def _chat_embeddings(call: Call[ChatEmbeddingRequest]) -> Served:
    wire, service = call.wire, call.service
    if service.tasks.images:
        return _served(call, EmbedRequest([_one_input(wire)]))
    if any(isinstance(part, ImageInput) for m in wire.messages for part in m.parts()):
        raise InvalidRequestError(
            f"messages hold an image, and {service.served_name} embeds text only; send images "
            "to an image-text model (CLIP, SigLIP)",
            param="messages",
        )
    template = service.tasks.chat_template
    if template is None:
        raise InvalidRequestError(
            f"{service.served_name} has no chat template (its checkpoint carries none); send "
            "the text as `input` instead of `messages`",
            param="messages",
        )
    if wire.prompt is not None or wire.prompt_name is not None:
        raise InvalidRequestError(
            "prompt and prompt_name go before `input` texts; with `messages`, put the "
            "instruction in the conversation (a system or user message)",
            param="prompt" if wire.prompt is not None else "prompt_name",
        )
    chat = ChatOptions(
        template,
        wire.add_generation_prompt,
        wire.continue_final_message,
        wire.chat_template_kwargs or {},
    )
    conversation = [message.as_dict() for message in wire.messages]
    request = EmbedRequest([conversation], chat=chat, add_special_tokens=wire.add_special_tokens)
    return _served(call, request)


def _one_input(wire: ChatEmbeddingRequest) -> str | ImageInput:
    """What an image-text model embeds of a conversation (it has no chat template): its one
    image, or its text (vLLM's rule for CLIP: one or the other, not both)."""
    parts = [part for message in wire.messages for part in message.parts()]
    images = [part for part in parts if isinstance(part, ImageInput)]
    texts = [part for part in parts if isinstance(part, str) and part.strip()]
    if len(images) > 1 or (images and texts):
        raise InvalidRequestError(
            "an image-text model embeds one image or one text per conversation; these messages "
            f"hold {len(images)} images and {len(texts)} texts (send each as an input of its "
            "own)",
            param="messages",
        )
    return images[0] if images else "\n".join(texts)


def _served(call: Call[Any], request: EmbedRequest) -> Served:
    """An embedding request (its inputs and prompt chosen) with the wire's options."""
    wire, service = call.wire, call.service
    embed = service.tasks.embed
    assert embed is not None  # model_for chose a model that serves this route
    params = service.pooling_params(
        normalize=wire.wants_normalize(),
        dimensions=wire.dimensions,
        truncate_prompt_tokens=wire.truncate_prompt_tokens,
        truncation_side=wire.truncation_side,
    )
    chunking = wire.chunking.chunking() if wire.chunking else Chunking()
    late = chunking.method == "late"
    request = replace(
        request,
        long_input=long_input_of(wire, service.long_input),
        chunking=chunking,
        media=call.state.media,
    )
    options: dict[str, Any] = {
        "encoding_format": wire.encoding_format,
        "embed_dtype": wire.embed_dtype,
        "endianness": wire.endianness,
    }
    images = [
        (f"input {index}", each)
        for index, each in enumerate(request.inputs)
        if isinstance(each, ImageInput)
    ]
    if wire.return_chunks or late:
        chunked = service.tasks.embed_chunks
        assert chunked is not None
        encode = partial(chunked_embeddings_body, **options)
        return Served(chunked, request, params, encode, wire.request_timeout, images)
    encode = partial(embeddings_body, **options)
    return Served(embed, request, params, encode, wire.request_timeout, images)


def long_input_of(wire: EmbeddingRequest, default: LongInput) -> LongInput:
    """The request's `long_input`: as sent, implied by chunking or return_chunks, or the
    server's; chunking options beside a long_input that does not chunk are a 400."""
    wants_chunks = wire.return_chunks or (wire.chunking is not None)
    if wire.long_input is None:
        return "chunk" if wants_chunks else default
    if wants_chunks and wire.long_input != "chunk":
        raise InvalidRequestError(
            f"long_input {wire.long_input!r} does not chunk, but chunking or return_chunks asks "
            'for chunks; leave long_input out or pass "chunk"',
            param="long_input",
        )
    return wire.long_input


ENDPOINTS = [
    Endpoint(
        "/v1/embeddings",
        EmbeddingRequest,
        EmbeddingResponse,
        _embeddings,
        Inputs("input", lambda wire: len(wire.inputs())),
        "create_embeddings",
        serves=embedders,
    ),
    Endpoint(
        "/v1/embeddings",
        ChatEmbeddingRequest,
        EmbeddingResponse,
        _chat_embeddings,
        Inputs("messages", lambda wire: 1),
        "create_embeddings",
        serves=embedders,
        matches=_is_chat,
    ),
]
