"""text-embeddings-inference's routes (`/embed`, `/embed_all`, `/predict`, `/similarity`,
`/info`, and `POST /`, which the Hugging Face `InferenceClient` calls), over the same tasks.
Their errors take TEI's shape, `{"error", "error_type"}`. TEI's shapes of `/rerank` and
`/tokenize` are served by those routes when the body has TEI's fields."""

from __future__ import annotations

from functools import partial
from typing import Any

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from poolserve._version import __version__
from poolserve.engine.cpu_pool import CpuPool
from poolserve.errors import InvalidRequestError
from poolserve.server.body import parse_body, parse_chosen_body
from poolserve.server.errors import answer_tei_errors, name_inputs
from poolserve.server.handlers import serve_task, state_of
from poolserve.server.protocol import (
    TeiEmbedAllRequest,
    TeiEmbedRequest,
    TeiPredictRequest,
    TeiSimilarityRequest,
)
from poolserve.server.responses import json_response
from poolserve.server.schemas import (
    TeiEmbedResponse,
    TeiInfo,
    TeiPredictResponse,
    TeiSimilarityResponse,
    documented,
)
from poolserve.server.state import ServingState
from poolserve.server.wire import tei
from poolserve.service import ModelService
from poolserve.tasks.base import PoolingParams
from poolserve.tasks.classify import ClassifyRequest
from poolserve.tasks.embed import EmbedRequest, EmbedTask
from poolserve.tasks.pooling import PoolingRequest
from poolserve.tasks.score import ScoreRequest, pair_up

tei_router = APIRouter()
tei_embed_router = APIRouter()
tei_predict_router = APIRouter()
tei_inference_router = APIRouter()


def _texts(state: ServingState, inputs: str | list[str]) -> list[str]:
    texts = [inputs] if isinstance(inputs, str) else inputs
    if not texts:
        raise InvalidRequestError("inputs is empty; send at least one text", param="inputs")
    state.check_batch(len(texts), "inputs")
    return texts


def _tei(request: Request) -> ServingState:
    answer_tei_errors(request)
    name_inputs(request, "inputs", "`truncate: true`")
    return state_of(request)


async def _embed(request: Request, state: ServingState, wire: TeiEmbedRequest) -> Response:
    service = state.model_for(request.scope, None)
    params = service.pooling_params(
        normalize=wire.normalize,
        dimensions=wire.dimensions,
        truncate_prompt_tokens=-1 if wire.truncate else None,
        truncation_side=wire.side(),
    )
    internal = EmbedRequest(
        _texts(state, wire.inputs), service.tasks.prompts.resolve(wire.prompt_name, None)
    )
    return await serve_task(
        request,
        service,
        _embed_task(service),
        internal,
        params,
        tei.vectors_body,
        timeout=wire.request_timeout,
    )


@tei_embed_router.post("/embed", **documented(TeiEmbedResponse, TeiEmbedRequest, errors="tei"))
async def embed(request: Request) -> Response:
    state = _tei(request)
    return await _embed(request, state, await parse_body(request, TeiEmbedRequest, _cpu(state)))


@tei_embed_router.post(
    "/embed_all", **documented(TeiEmbedResponse, TeiEmbedAllRequest, errors="tei")
)
async def embed_all(request: Request) -> Response:
    state = _tei(request)
    wire = await parse_body(request, TeiEmbedAllRequest, _cpu(state))
    service = state.model_for(request.scope, None)
    params = service.pooling_params(
        normalize=False,
        truncate_prompt_tokens=-1 if wire.truncate else None,
        truncation_side=wire.side(),
    )
    internal = PoolingRequest(_texts(state, wire.inputs), "token_embed")
    return await serve_task(
        request,
        service,
        service.tasks.pooling,
        internal,
        params,
        tei.token_vectors_body,
        timeout=wire.request_timeout,
    )


async def _predict(
    request: Request, state: ServingState, wire: TeiPredictRequest, *, nested: bool
) -> Response:
    service = state.model_for(request.scope, None)
    parameters = wire.parameters
    raw = wire.raw_scores or (parameters is not None and parameters.function_to_apply == "none")
    asked = parameters.function_to_apply if parameters is not None else None
    own = service.tasks.classify.classifier.activation if service.tasks.classify else None
    if asked in ("sigmoid", "softmax") and own is not None and asked != own:
        raise InvalidRequestError(
            f"this model's scores come through {own}, not {asked}: leave function_to_apply "
            'out (or pass it as "none" for the raw logits)',
            param="parameters.function_to_apply",
        )
    params = service.pooling_params(
        use_activation=not raw,
        truncate_prompt_tokens=-1 if wire.truncate else None,
        truncation_side=wire.side(),
    )
    top_k = parameters.top_k if parameters is not None else None
    single = isinstance(wire.inputs, str) and not nested
    inputs = [wire.inputs] if isinstance(wire.inputs, str) else wire.inputs
    if not inputs:
        raise InvalidRequestError(
            "inputs is empty; send a text, a list of texts or of [text, text] pairs",
            param="inputs",
        )
    state.check_batch(len(inputs), "inputs")
    pairs = [item for item in inputs if isinstance(item, list)]
    if pairs:  # the schema allows texts or pairs, never a mix
        return await _predict_pairs(request, state, wire, pairs, params)
    task = service.tasks.classify
    if task is None:
        raise InvalidRequestError(f"/predict needs a classifier; this is {service.kind}")
    encode = partial(
        tei.predictions_body, labels=task.classifier.labels, top_k=top_k, single=single
    )
    return await serve_task(
        request,
        service,
        task,
        ClassifyRequest([text for text in inputs if isinstance(text, str)]),
        params,
        encode,
        timeout=wire.request_timeout,
    )


async def _predict_pairs(
    request: Request,
    state: ServingState,
    wire: TeiPredictRequest,
    pairs: list[list[str]],
    params: PoolingParams,
) -> Response:
    """[text, text] pairs through a cross-encoder: one score each, labelled."""
    service = state.model_for(request.scope, None)
    task = service.tasks.score
    if service.kind != "cross_encoder" or task is None or service.tasks.classify is None:
        raise InvalidRequestError(
            "[text, text] pairs need a cross-encoder; send texts", param="inputs"
        )
    queries, documents = [pair[0] for pair in pairs], [pair[1] for pair in pairs]
    internal = ScoreRequest(queries, documents, pair_up(len(queries), len(documents)))
    encode = partial(
        tei.predictions_body,
        labels=service.tasks.classify.classifier.labels[:1],
        top_k=None,
        single=False,
    )
    return await serve_task(
        request,
        service,
        task,
        internal,
        params,
        lambda ctx, scores: encode(ctx, scores.reshape(-1, 1)),
        timeout=wire.request_timeout,
    )


@tei_predict_router.post(
    "/predict", **documented(TeiPredictResponse, TeiPredictRequest, errors="tei")
)
async def predict(request: Request) -> Response:
    state = _tei(request)
    wire = await parse_body(request, TeiPredictRequest, _cpu(state))
    return await _predict(request, state, wire, nested=False)


async def _similarity(
    request: Request, state: ServingState, wire: TeiSimilarityRequest
) -> Response:
    service = state.model_for(request.scope, None)
    task = service.tasks.score
    if service.kind != "embedding" or task is None:
        raise InvalidRequestError(f"/similarity needs an embedding model; this is {service.kind}")
    sentences = wire.inputs.sentences
    state.check_batch(len(sentences), "sentences")
    params = service.pooling_params(
        truncate_prompt_tokens=-1 if wire.truncate else None, truncation_side=wire.side()
    )
    internal = ScoreRequest([wire.inputs.source_sentence], sentences, pair_up(1, len(sentences)))
    return await serve_task(
        request, service, task, internal, params, tei.similarity_body, timeout=wire.request_timeout
    )


@tei_embed_router.post(
    "/similarity", **documented(TeiSimilarityResponse, TeiSimilarityRequest, errors="tei")
)
async def similarity(request: Request) -> Response:
    state = _tei(request)
    wire = await parse_body(request, TeiSimilarityRequest, _cpu(state))
    return await _similarity(request, state, wire)


@tei_inference_router.post(
    "/",
    **documented(
        TeiEmbedResponse | TeiSimilarityResponse | TeiPredictResponse,
        TeiEmbedRequest,
        TeiSimilarityRequest,
        TeiPredictRequest,
        errors="tei",
    ),
)
async def inference_api(request: Request) -> Response:
    """The Hugging Face Inference API's one route, as text-embeddings-inference serves it:
    feature extraction and sentence similarity on an embedding model, text classification on
    a classifier or cross-encoder (a single text's labels in a list of one)."""
    state = _tei(request)
    kind = state.model_for(request.scope, None).kind
    if kind == "embedding":

        def choose(data: Any) -> type[TeiEmbedRequest] | type[TeiSimilarityRequest]:
            inputs = data.get("inputs") if isinstance(data, dict) else None
            return TeiSimilarityRequest if isinstance(inputs, dict) else TeiEmbedRequest

        wire = await parse_chosen_body(request, choose, _cpu(state))
        if isinstance(wire, TeiSimilarityRequest):
            return await _similarity(request, state, wire)
        return await _embed(request, state, wire)
    if state.model_for(request.scope, None).tasks.classify is not None:
        predict_wire = await parse_body(request, TeiPredictRequest, _cpu(state))
        return await _predict(request, state, predict_wire, nested=True)
    # Served for another model of the server; the body's model (none here) is the first.
    raise InvalidRequestError(
        f"POST / serves embedding models and classifiers; the first model is {kind}: use /pooling"
    )


@tei_router.get("/info", **documented(TeiInfo, errors="tei"))
async def info(request: Request) -> Response:
    """What text-embeddings-inference's `/info` says about the served model."""
    state = _tei(request)
    service = state.model_for(request.scope, None)
    classifier = service.tasks.classify.classifier if service.tasks.classify is not None else None
    if classifier is not None:
        id2label = dict(enumerate(classifier.labels))
        model_type: dict[str, Any] = {
            "reranker" if service.kind == "cross_encoder" else "classifier": {
                "id2label": {str(i): label for i, label in id2label.items()},
                "label2id": {label: i for i, label in id2label.items()},
            }
        }
    else:
        pooling = "+".join(service.core.model.layout.pooling_modes)
        model_type = {"embedding": {"pooling": pooling}}
    body = {
        "model_id": service.served_name,
        "model_sha": None,
        "model_dtype": str(service.core.model.dtype).removeprefix("torch."),
        "model_type": model_type,
        "max_concurrent_requests": state.admission.max_requests,
        "max_input_length": service.max_model_len,
        "max_batch_tokens": service.core.config.max_batch_tokens,
        "max_batch_requests": service.core.config.max_batch_size,
        "max_client_batch_size": state.max_client_batch_size,
        "auto_truncate": False,
        "tokenization_workers": state.cpu.workers,
        "version": __version__,
        **service.tasks.prompts.card(),
    }
    return json_response(orjson.dumps(body))


def _cpu(state: ServingState) -> CpuPool:
    return state.cpu


def _embed_task(service: ModelService) -> EmbedTask:
    assert service.tasks.embed is not None  # model_for chose a model that serves this route
    return service.tasks.embed
