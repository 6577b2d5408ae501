"""Routes of the score and sparse tasks: score, rerank (vLLM's, Jina's, Cohere's and
text-embeddings-inference's shapes), embed_sparse.

`create_app` includes a router when a served model has its task (see `server/model_routes.py`).
"""

from __future__ import annotations

from functools import partial

import numpy as np
from fastapi import APIRouter, Request
from starlette.responses import Response

from poolserve.engine.tokenizer import Side
from poolserve.errors import InvalidRequestError
from poolserve.server.body import parse_body
from poolserve.server.errors import answer_tei_errors, name_inputs
from poolserve.server.handlers import parse_tei_or_other, serve_task, state_of
from poolserve.server.protocol import (
    RerankRequest,
    ScoreRequest,
    SparseEmbedRequest,
    TeiRerankRequest,
)
from poolserve.server.schemas import (
    RerankResponse,
    ScoreResponse,
    SparseResponse,
    TeiRerankResponse,
    documented,
)
from poolserve.server.wire import tei, vllm
from poolserve.service import ModelService
from poolserve.tasks.base import Encoder, PoolingParams
from poolserve.tasks.pooling import PoolingRequest as PoolingInternal
from poolserve.tasks.score import ScoreRequest as ScoreInternal
from poolserve.tasks.score import pair_up

score_router = APIRouter()
sparse_router = APIRouter()


def _params(
    service: ModelService,
    *,
    truncate_prompt_tokens: int | None,
    truncation_side: Side = "right",
    use_activation: bool | None = None,
    normalize: bool | None = None,
) -> PoolingParams:
    return service.pooling_params(
        normalize=normalize,
        truncate_prompt_tokens=truncate_prompt_tokens,
        truncation_side=truncation_side,
        use_activation=use_activation is not False,
    )


async def _score(
    request: Request,
    model: str | None,
    queries: list[str],
    documents: list[str],
    encode: Encoder[ScoreInternal, np.ndarray],
    *,
    truncate_prompt_tokens: int | None,
    truncation_side: Side,
    max_tokens_per_doc: int | None,
    use_activation: bool | None,
    rerank: bool,
    timeout: float | None,
    scorer: str | None = None,
) -> Response:
    state = state_of(request)
    service = state.model_for(request.scope, model)
    task = service.tasks.score
    assert task is not None  # model_for chose a model that serves this route
    state.check_batch(len(queries), "queries")
    state.check_batch(len(documents), "documents")
    internal = ScoreInternal(
        queries=queries,
        documents=documents,
        pairs=pair_up(len(queries), len(documents)),
        rerank=rerank,
        max_tokens_per_doc=max_tokens_per_doc,
        scorer=scorer,
    )
    params = _params(
        service,
        truncate_prompt_tokens=truncate_prompt_tokens,
        truncation_side=truncation_side,
        use_activation=use_activation,
    )
    return await serve_task(request, service, task, internal, params, encode, timeout=timeout)


def _sides(wire: ScoreRequest) -> tuple[list[str], list[str]]:
    try:
        return wire.sides()
    except ValueError as exc:
        raise InvalidRequestError(str(exc), param="queries") from None


@score_router.post("/score", **documented(ScoreResponse, ScoreRequest))
@score_router.post("/v1/score", **documented(ScoreResponse, ScoreRequest))
async def score(request: Request) -> Response:
    wire = await parse_body(request, ScoreRequest, state_of(request).cpu)
    queries, documents = _sides(wire)
    return await _score(
        request,
        wire.model,
        queries,
        documents,
        vllm.score_body,
        truncate_prompt_tokens=wire.truncate_prompt_tokens,
        truncation_side=wire.truncation_side,
        max_tokens_per_doc=wire.max_tokens_per_doc,
        use_activation=wire.use_activation,
        rerank=False,
        timeout=wire.request_timeout,
        scorer=wire.scorer,
    )


RERANK_DOCS = documented(
    RerankResponse | TeiRerankResponse, RerankRequest, TeiRerankRequest, errors="either"
)


@score_router.post("/rerank", **RERANK_DOCS)
@score_router.post("/v1/rerank", **RERANK_DOCS)
@score_router.post("/v2/rerank", **RERANK_DOCS)
async def rerank(request: Request) -> Response:
    # text-embeddings-inference's shape has `texts`; vLLM's, Jina's and Cohere's `documents`.
    wire = await parse_tei_or_other(request, "texts", TeiRerankRequest, RerankRequest)
    if isinstance(wire, TeiRerankRequest):
        return await _score(
            request,
            None,
            [wire.query],
            wire.texts,
            partial(tei.rerank_body, texts=wire.texts, return_text=wire.return_text),
            truncate_prompt_tokens=-1 if wire.truncate else None,
            truncation_side=wire.side(),
            max_tokens_per_doc=None,
            use_activation=not wire.raw_scores,
            rerank=True,
            timeout=wire.request_timeout,
        )
    try:
        documents = wire.document_texts()
    except ValueError as exc:
        raise InvalidRequestError(str(exc), param="documents") from None
    encode = partial(
        vllm.rerank_body,
        documents=documents,
        top_n=wire.top_n,
        return_documents=wire.return_documents,
    )
    return await _score(
        request,
        wire.model,
        [wire.query],
        documents,
        encode,
        truncate_prompt_tokens=wire.truncate_prompt_tokens,
        truncation_side=wire.truncation_side,
        max_tokens_per_doc=wire.max_tokens_per_doc,
        use_activation=wire.use_activation,
        rerank=True,
        timeout=wire.request_timeout,
        scorer=wire.scorer,
    )


@sparse_router.post("/embed_sparse", **documented(SparseResponse, SparseEmbedRequest, errors="tei"))
async def embed_sparse(request: Request) -> Response:
    """text-embeddings-inference's sparse route: each input's nonzero weights."""
    answer_tei_errors(request)
    name_inputs(request, "inputs", "`truncate: true`")
    state = state_of(request)
    wire = await parse_body(request, SparseEmbedRequest, state.cpu)
    service = state.model_for(request.scope, wire.model)
    texts = [wire.inputs] if isinstance(wire.inputs, str) else wire.inputs
    state.check_batch(len(texts), "inputs")
    params = _params(service, truncate_prompt_tokens=-1 if wire.truncate else None)
    internal = PoolingInternal(texts, "sparse")
    return await serve_task(
        request,
        service,
        service.tasks.pooling,
        internal,
        params,
        tei.sparse_body,
        timeout=wire.request_timeout,
    )
