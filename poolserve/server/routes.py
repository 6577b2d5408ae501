"""Routes every model serves, and OpenAI embeddings: validate, then hand over to the template."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TypeVar

import orjson
from fastapi import APIRouter, Request
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.responses import Response

from poolserve import __version__
from poolserve.errors import InvalidRequestError
from poolserve.server.body import parse_body
from poolserve.server.errors import error_response
from poolserve.server.handlers import parse_tei_or_other, read_inputs, serve_task, state_of
from poolserve.server.protocol import (
    DetokenizeRequest,
    EmbeddingRequest,
    TeiTokenizeRequest,
    TokenizeRequest,
)
from poolserve.server.responses import json_response
from poolserve.server.schemas import (
    DetokenizeResponse,
    EmbeddingResponse,
    Health,
    ModelCard,
    ModelList,
    StatsBody,
    TeiTokenizeResponse,
    TokenizeResponse,
    VersionBody,
    documented,
)
from poolserve.server.state import ServingState
from poolserve.server.wire import openai, tei
from poolserve.tasks.embed import EmbedRequest

router = APIRouter()
embeddings_router = APIRouter()

# Routes every model serves (the model-specific ones come from its TaskSet).
COMMON_ROUTES = (
    "/tokenize",
    "/detokenize",
    "/v1/models",
    "/health",
    "/version",
    "/metrics",
    "/stats",
    "/info",
    "/",
)

WireT = TypeVar("WireT", TokenizeRequest, DetokenizeRequest)


@embeddings_router.post("/v1/embeddings", **documented(EmbeddingResponse, EmbeddingRequest))
async def create_embeddings(request: Request) -> Response:
    state, wire, inputs = await read_inputs(request, EmbeddingRequest)
    engine = state.engine
    params = engine.pooling_params(
        normalize=wire.wants_normalize(),
        dimensions=wire.dimensions,
        truncate_prompt_tokens=wire.truncate_prompt_tokens,
        truncation_side=wire.truncation_side,
    )
    return await serve_task(
        request,
        engine.embed_task,
        EmbedRequest(inputs, engine.tasks.prompts.resolve(wire.prompt_name, wire.prompt)),
        params,
        partial(
            openai.embeddings_body,
            encoding_format=wire.encoding_format,
            embed_dtype=wire.embed_dtype,
            endianness=wire.endianness,
        ),
        timeout=wire.request_timeout,
    )


def _tokenize(state: ServingState, wire: TokenizeRequest) -> bytes:
    tokenizer = state.engine.core.cpu.tokenizer()
    ids = tokenizer.encode_batch(
        [wire.prompt], truncate_to=None, add_special_tokens=wire.add_special_tokens
    )[0]
    return orjson.dumps(
        {
            "count": len(ids),
            "max_model_len": state.engine.max_model_len,
            "tokens": ids,
            "token_strs": tokenizer.token_strings(ids) if wire.return_token_strs else None,
        }
    )


async def _answer_in_pool(
    request: Request,
    schema: type[WireT],
    build: Callable[[ServingState, WireT], bytes],
) -> Response:
    """Validate the body, check the model, build the response bytes in the CPU pool."""
    state = state_of(request)
    cpu = state.engine.core.cpu
    wire = await parse_body(request, schema, cpu)
    state.check_model(wire.model)
    return json_response(await cpu.run(build, state, wire))


@router.post(
    "/tokenize",
    **documented(TokenizeResponse | TeiTokenizeResponse, TokenizeRequest, TeiTokenizeRequest),
)
async def tokenize(request: Request) -> Response:
    state = state_of(request)
    cpu = state.engine.core.cpu
    # text-embeddings-inference's shape has `inputs`; vLLM's `prompt`.
    wire = await parse_tei_or_other(request, "inputs", TeiTokenizeRequest, TokenizeRequest)
    if isinstance(wire, TeiTokenizeRequest):
        texts = [wire.inputs] if isinstance(wire.inputs, str) else wire.inputs
        if not texts:
            raise InvalidRequestError("inputs is empty; send at least one text", param="inputs")
        state.check_batch(len(texts), "inputs")
        body = await cpu.run(
            lambda: tei.tokens_body(cpu.tokenizer(), texts, wire.add_special_tokens)
        )
        return json_response(body)
    state.check_model(wire.model)
    return json_response(await cpu.run(_tokenize, state, wire))


def _detokenize(state: ServingState, wire: DetokenizeRequest) -> bytes:
    tokenizer = state.engine.core.cpu.tokenizer()
    tokenizer.check_token_ids(wire.tokens, param="tokens")
    return orjson.dumps({"prompt": tokenizer.decode(wire.tokens)})


@router.post("/detokenize", **documented(DetokenizeResponse, DetokenizeRequest))
async def detokenize(request: Request) -> Response:
    return await _answer_in_pool(request, DetokenizeRequest, _detokenize)


def _model_card(state: ServingState, name: str) -> dict[str, object]:
    return {
        "id": name,
        "object": "model",
        "created": state.created,
        "owned_by": "poolserve",
        "root": state.engine.name,
        "max_model_len": state.engine.max_model_len,
        **state.engine.tasks.prompts.card(),
    }


@router.get("/v1/models", **documented(ModelList))
async def list_models(request: Request) -> Response:
    state = state_of(request)
    models = [_model_card(state, name) for name in state.served_names]
    return json_response(orjson.dumps({"object": "list", "data": models}))


@router.get("/v1/models/{model_id:path}", **documented(ModelCard))
async def retrieve_model(request: Request, model_id: str) -> Response:
    """One served model (the OpenAI client's `models.retrieve`); 404 names the served ones."""
    state = state_of(request)
    state.check_model(model_id)
    return json_response(orjson.dumps(_model_card(state, model_id)))


@router.get("/health", **documented(Health))
@router.head("/health", operation_id="health_head")
async def health(request: Request) -> Response:
    if state_of(request).engine.alive:
        return json_response(b"{}")
    return error_response(503, "the model runner is not running; the server log says why")


@router.get("/version", **documented(VersionBody))
async def version() -> Response:
    return json_response(orjson.dumps({"version": __version__}))


@router.get(
    "/metrics",
    responses={200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus text"}},
)
async def metrics(request: Request) -> Response:
    """Prometheus exposition (rendered in the CPU pool)."""
    state = state_of(request)
    body = await state.engine.core.cpu.run(state.metrics.exposition)
    return Response(body, media_type=CONTENT_TYPE_LATEST)


@router.get("/stats", **documented(StatsBody))
async def engine_stats(request: Request) -> Response:
    """Engine and admission counters since start-up (batches, batch sizes, skipped items,
    tokens in work, admitted cost), as JSON; /metrics has them for Prometheus."""
    state = state_of(request)
    core, admission = state.engine.core, state.admission
    stats = {
        **core.stats.snapshot().as_dict(),
        "queued_items": core.queued_items,
        "tokens_in_work": core.tokens_in_work,
        "peak_tokens_in_work": core.peak_tokens_in_work,
        "requests_in_flight": admission.in_flight,
        "admitted_tokens": admission.admitted_tokens,
        "peak_admitted_tokens": admission.peak_admitted_tokens,
        "max_queued_tokens": admission.max_tokens,
    }
    return json_response(orjson.dumps(stats, option=orjson.OPT_NON_STR_KEYS))
