"""The routes every server has, whatever its models: tokenize and detokenize (vLLM's shape, and
text-embeddings-inference's `/tokenize`), the model list, health, version, metrics and stats,
and text-embeddings-inference's `/info`.

They run no task, so they are routes written out rather than declared endpoints."""

from __future__ import annotations

from typing import Any, TypeVar

import orjson
from fastapi import APIRouter, Request
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel
from starlette.responses import Response

from poolserve._version import __version__
from poolserve.apis.answer_docs import (
    DetokenizeResponse,
    ErrorBody,
    Health,
    ModelCard,
    ModelList,
    StatsBody,
    TokenizeResponse,
    VersionBody,
)
from poolserve.apis.request_bodies import DetokenizeRequest, TokenizeRequest
from poolserve.apis.tei.answers import (
    TEI_ERRORS,
    TeiErrorBody,
    TeiInfo,
    TeiTokenizeResponse,
    tokens_body,
)
from poolserve.apis.tei.info import info_fields
from poolserve.apis.tei.requests import TeiTokenizeRequest
from poolserve.errors import InvalidRequestError
from poolserve.server.app_state import model_for, state_of
from poolserve.server.body import parse_body, parse_chosen_body
from poolserve.server.error_responses import answer_errors_as, error_response
from poolserve.server.openapi_docs import documented
from poolserve.server.responses import json_response
from poolserve.service.model_service import ModelService
from poolserve.serving.serving_state import ServingState

TeiT = TypeVar("TeiT", bound=BaseModel)
OtherT = TypeVar("OtherT", bound=BaseModel)

ROUTES = APIRouter()


def _tokenize(service: ModelService, wire: TokenizeRequest) -> bytes:
    tokenizer = service.tokenizer()
    ids = tokenizer.encode_batch(
        [wire.prompt], truncate_to=None, add_special_tokens=wire.add_special_tokens
    )[0]
    return orjson.dumps(
        {
            "count": len(ids),
            "max_model_len": service.max_model_len,
            "tokens": ids,
            "token_strs": tokenizer.token_strings(ids) if wire.return_token_strs else None,
        }
    )


@ROUTES.post(
    "/tokenize",
    **documented(
        TokenizeResponse | TeiTokenizeResponse,
        TokenizeRequest,
        TeiTokenizeRequest,
        errors=(ErrorBody, TeiErrorBody),
    ),
)
async def tokenize(request: Request) -> Response:
    state = state_of(request)
    cpu = state.cpu
    # text-embeddings-inference's shape has `inputs`; vLLM's `prompt`.
    wire = await parse_tei_or(request, "inputs", TeiTokenizeRequest, TokenizeRequest)
    if isinstance(wire, TeiTokenizeRequest):
        service = model_for(state, request.scope, None)
        texts = [wire.inputs] if isinstance(wire.inputs, str) else wire.inputs
        if not texts:
            raise InvalidRequestError("inputs is empty; send at least one text", param="inputs")
        state.check_batch(len(texts), "inputs")
        body = await cpu.run(
            lambda: tokens_body(service.tokenizer(), texts, wire.add_special_tokens)
        )
        return json_response(body)
    service = model_for(state, request.scope, wire.model)
    return json_response(await cpu.run(_tokenize, service, wire))


def _detokenize(service: ModelService, wire: DetokenizeRequest) -> bytes:
    tokenizer = service.tokenizer()
    tokenizer.check_token_ids(wire.tokens, param="tokens")
    return orjson.dumps({"prompt": tokenizer.decode(wire.tokens)})


@ROUTES.post("/detokenize", **documented(DetokenizeResponse, DetokenizeRequest))
async def detokenize(request: Request) -> Response:
    state = state_of(request)
    wire = await parse_body(request, DetokenizeRequest, state.cpu)
    service = model_for(state, request.scope, wire.model)
    return json_response(await state.cpu.run(_detokenize, service, wire))


def _model_card(state: ServingState, service: ModelService, name: str) -> dict[str, object]:
    return {
        "id": name,
        "object": "model",
        "created": state.created,
        "owned_by": "poolserve",
        "root": service.name,
        "kind": service.kind,
        "routes": list(state.routes_of(service)),
        "max_model_len": service.max_model_len,
        "embedding_dim": service.embedding_dim if service.tasks.embed is not None else None,
        "embedding_space": (
            service.embedding_space("embed", service.pooling_params())
            if service.tasks.embed is not None
            else None
        ),
        "input_modalities": ["text", "image"] if service.tasks.images else ["text"],
        **service.tasks.prompts.card(),
    }


@ROUTES.get("/v1/models", **documented(ModelList))
async def list_models(request: Request) -> Response:
    """Every served name of every model, in the models' order."""
    state = state_of(request)
    models = [
        _model_card(state, service, name)
        for service in state.models
        for name in service.served_names
    ]
    return json_response(orjson.dumps({"object": "list", "data": models}))


@ROUTES.get("/v1/models/{model_id:path}", **documented(ModelCard))
async def retrieve_model(request: Request, model_id: str) -> Response:
    """One served model (the OpenAI client's `models.retrieve`); 404 names the served ones."""
    state = state_of(request)
    service = state.models.find(model_id)
    return json_response(orjson.dumps(_model_card(state, service, model_id)))


@ROUTES.get("/health", **documented(Health, also=(503,)))
@ROUTES.head(
    "/health",
    operation_id="health_head",
    **documented({"description": "every model runner is alive (no body)"}, also=(503,)),
)
async def health(request: Request) -> Response:
    models = state_of(request).models
    dead = [service.served_name for service in models if not service.alive]
    if not dead:
        runners = {
            service.served_name: {
                "runners": service.core.runners,
                "runners_alive": service.core.runners_alive,
            }
            for service in models
        }
        return json_response(orjson.dumps({"status": "ok", "models": runners}))
    return error_response(
        503,
        f"the model runner of {', '.join(map(repr, dead))} is not running; the server log says why",
    )


@ROUTES.get("/version", **documented(VersionBody))
async def version() -> Response:
    return json_response(orjson.dumps({"version": __version__}))


@ROUTES.get(
    "/metrics",
    **documented({"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus text"}),
)
async def metrics(request: Request) -> Response:
    """Prometheus exposition (rendered in the CPU pool)."""
    state = state_of(request)
    body = await state.cpu.run(state.metrics.exposition)
    return Response(body, media_type=CONTENT_TYPE_LATEST)


@ROUTES.get("/stats", **documented(StatsBody))
async def engine_stats(request: Request) -> Response:
    """Engine and admission counters since start-up (batches, batch sizes, skipped items,
    tokens in work, admitted cost), as JSON; /metrics has them for Prometheus. The engine's
    counters are the first model's at the top level (as with one model), and every model's
    under `models`, by served name."""
    state = state_of(request)
    admission = state.admission
    models = {service.served_name: _engine_stats(service) for service in state.models}
    stats = {
        **models[state.models.first.served_name],
        "requests_in_flight": admission.in_flight,
        "requests_waiting": admission.waiting,
        "requests_waited": admission.waited,
        "admitted_tokens": admission.admitted_tokens,
        "peak_admitted_tokens": admission.peak_admitted_tokens,
        "max_queued_tokens": admission.max_tokens,
        "admitted_background_tokens": admission.admitted_background,
        "max_background_tokens": admission.background_tokens,
        "lanes": state.metrics.lanes.report(),
        "models": models,
    }
    return json_response(orjson.dumps(stats, option=orjson.OPT_NON_STR_KEYS))


def _engine_stats(service: ModelService) -> dict[str, object]:
    core = service.core
    return {
        **core.stats.snapshot().as_dict(),
        "queued_items": core.queued_items,
        "tokens_in_work": core.tokens_in_work,
        "peak_tokens_in_work": core.peak_tokens_in_work,
        "compiled": core.compiled,
        "packed_heads": sorted(core.packed_heads),
        **(core.cache.stats().as_dict() if core.cache is not None else {}),
    }


@ROUTES.get("/info", **documented(TeiInfo, errors=TEI_ERRORS.body))
async def info(request: Request) -> Response:
    """What text-embeddings-inference's `/info` says about the served model."""
    answer_errors_as(request, TEI_ERRORS)
    state = state_of(request)
    service = model_for(state, request.scope, None)
    return json_response(orjson.dumps(info_fields(state, service)))


async def parse_tei_or(
    request: Request, tei_field: str, tei: type[TeiT], other: type[OtherT]
) -> TeiT | OtherT:
    """The body of a route that serves text-embeddings-inference's shape next to another one:
    `tei` when the body has `tei_field`, else `other`. A TEI body's errors take TEI's shape."""

    def choose(data: Any) -> type[TeiT] | type[OtherT]:
        return tei if isinstance(data, dict) and tei_field in data else other

    def chosen(schema: type[TeiT] | type[OtherT]) -> None:
        if schema is tei:
            answer_errors_as(request, TEI_ERRORS)

    return await parse_chosen_body(request, choose, state_of(request).cpu, chosen)
