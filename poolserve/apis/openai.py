"""OpenAI's embeddings API (`POST /v1/embeddings`), with vLLM's options (`truncate_prompt_tokens`,
`embed_dtype`, `normalize`, prompts): its endpoints, and what a body asks of the embedding task
(its request bodies and its answer are openai_wire.py)."""

from __future__ import annotations

from functools import partial
from typing import Any

from poolserve.apis.declarations import Call, Endpoint, Inputs, Served, embedders
from poolserve.apis.openai_wire import (
    ChatEmbeddingRequest,
    EmbeddingRequest,
    EmbeddingResponse,
    chunked_embeddings_body,
    embeddings_body,
)
from poolserve.config import LongInput
from poolserve.engine.context import Encoder, PoolingOptions, PoolingParams, Task
from poolserve.errors import InvalidRequestError
from poolserve.inputs.images.sources import ImageInput, named_images
from poolserve.service.model_service import ModelService
from poolserve.serving.serving_step import Vectors
from poolserve.tasks.chat import ChatOptions
from poolserve.tasks.chunking import Chunking
from poolserve.tasks.embed import EmbedRequest


def _is_chat(data: Any, service: ModelService) -> bool:
    return isinstance(data, dict) and "messages" in data


def _embeddings(call: Call[EmbeddingRequest]) -> Served:
    wire, service = call.wire, call.service
    prompt = service.tasks.prompts.resolve(wire.prompt_name, wire.prompt)
    return _served(call, inputs=wire.inputs(), prompt=prompt)


def _chat_embeddings(call: Call[ChatEmbeddingRequest]) -> Served:
    wire, service = call.wire, call.service
    if service.tasks.images:
        one, where = _one_input(wire)
        return _served(call, inputs=[one], image_names=where)
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
    return _served(
        call, inputs=[conversation], chat=chat, add_special_tokens=wire.add_special_tokens
    )


def _one_input(wire: ChatEmbeddingRequest) -> tuple[str | ImageInput, str]:
    """What an image-text model embeds of a conversation (it has no chat template): its one
    image, or its text (vLLM's rule for CLIP: one or the other, not both); and how errors name
    it ("messages[1].content[0]")."""
    located = [
        (part, f"messages[{m}].content[{p}]")
        for m, message in enumerate(wire.messages)
        for p, part in enumerate(message.parts())
    ]
    images = [(part, where) for part, where in located if isinstance(part, ImageInput)]
    texts = [part for part, _ in located if isinstance(part, str) and part.strip()]
    if len(images) > 1 or (images and texts):
        raise InvalidRequestError(
            "an image-text model embeds one image or one text per conversation; these messages "
            f"hold {len(images)} images and {len(texts)} texts (send each as an input of its "
            "own)",
            param="messages",
        )
    return images[0] if images else ("\n".join(texts), "messages")


def _served(call: Call[Any], **chosen: Any) -> Served:
    """An embedding request (`chosen`: its inputs, prompt, ... as EmbedRequest names them)
    with the wire's options."""
    wire, service = call.wire, call.service
    if wire.chunking is None:  # (chunking options hold lists: made for each request)
        key = (
            "openai",
            wire.wants_normalize(),
            wire.dimensions,
            wire.truncate_prompt_tokens,
            wire.truncation_side,
            wire.long_input,
            wire.return_chunks,
            wire.encoding_format,
            wire.embed_dtype,
            wire.endianness,
        )
        options = service.remembered(key, partial(_options, wire, service))
    else:
        options = _options(wire, service)
    task, params, long_input, chunking, encode, vectors = options
    request = EmbedRequest(
        **chosen, long_input=long_input, chunking=chunking, media=call.state.media
    )
    images = named_images(request.inputs, request.image_names)
    return Served(task, request, params, encode, wire.request_timeout, images, vectors)


def _options(
    wire: EmbeddingRequest, service: ModelService
) -> tuple[Task[Any, Any], PoolingParams, LongInput, Chunking, Encoder[Any, Any], Vectors]:
    """What `wire`'s options (all but its inputs and prompt) ask of `service`: the task, the
    pooling, the long-input rule and chunking, the answer's encoder and vectors."""
    embed = service.tasks.embed
    assert embed is not None  # model_for chose a model that serves this route
    params = service.pooling_params(
        PoolingOptions(
            normalize=wire.wants_normalize(),
            dimensions=wire.dimensions,
            truncate_prompt_tokens=wire.truncate_prompt_tokens,
            truncation_side=wire.truncation_side,
        )
    )
    chunking = wire.chunking.chunking() if wire.chunking else Chunking()
    long_input = long_input_of(wire, service.long_input)
    options: dict[str, Any] = {
        "encoding_format": wire.encoding_format,
        "embed_dtype": wire.embed_dtype,
        "endianness": wire.endianness,
    }
    vectors = Vectors(types=(wire.embed_dtype,))
    if wire.return_chunks or chunking.method == "late":
        chunked = service.tasks.embed_chunks
        assert chunked is not None
        encode = partial(chunked_embeddings_body, **options)
        return chunked, params, long_input, chunking, encode, vectors
    return embed, params, long_input, chunking, partial(embeddings_body, **options), vectors


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
        Inputs("input", lambda wire: wire.input_count()),
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
