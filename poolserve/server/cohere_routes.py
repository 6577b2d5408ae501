"""Cohere's embed API (`POST /v2/embed`, `/v1/embed`) over the embedding task: `input_type`
picks the model's prompt, `embedding_types` the compact types, `truncate` the end to cut."""

from __future__ import annotations

from functools import partial

from fastapi import APIRouter, Request
from starlette.responses import Response

from poolserve.errors import InvalidRequestError
from poolserve.server.body import parse_body
from poolserve.server.errors import name_inputs
from poolserve.server.handlers import serve_task, state_of
from poolserve.server.protocol import CohereEmbedRequest
from poolserve.server.schemas import CohereEmbedResponse, documented
from poolserve.server.wire import cohere
from poolserve.tasks.embed import EmbedRequest

cohere_router = APIRouter()


async def _embed(request: Request, version: cohere.Version) -> Response:
    name_inputs(request, "texts", '`truncate: "END"` (or "START")')
    state = state_of(request)
    wire = await parse_body(request, CohereEmbedRequest, state.cpu)
    service = state.model_for(request.scope, wire.model)
    embed = service.tasks.embed
    assert embed is not None  # model_for chose a model that serves this route
    state.check_batch(len(wire.texts), "texts")
    if wire.truncate == "NONE" and wire.max_tokens is not None:
        raise InvalidRequestError(
            "max_tokens cuts inputs, and truncate NONE says not to cut them; pass truncate "
            "START or END with max_tokens, or leave max_tokens out",
            param="max_tokens",
        )
    cut = None
    if wire.truncate != "NONE":
        cut = -1 if wire.max_tokens is None else min(wire.max_tokens, service.max_model_len)
    params = service.pooling_params(
        dimensions=wire.output_dimension,
        truncate_prompt_tokens=cut,
        truncation_side="left" if wire.truncate == "START" else "right",
    )
    prompt = service.tasks.prompts.for_input_type(wire.input_type)
    encode = partial(
        cohere.embed_body,
        texts=wire.texts,
        embedding_types=wire.embedding_types,
        version=version,
    )
    return await serve_task(
        request,
        service,
        embed,
        EmbedRequest(wire.texts, prompt),
        params,
        encode,
        timeout=wire.request_timeout,
    )


@cohere_router.post("/v2/embed", **documented(CohereEmbedResponse, CohereEmbedRequest))
async def embed_v2(request: Request) -> Response:
    return await _embed(request, "2")


@cohere_router.post("/v1/embed", **documented(CohereEmbedResponse, CohereEmbedRequest))
async def embed_v1(request: Request) -> Response:
    return await _embed(request, "1")
