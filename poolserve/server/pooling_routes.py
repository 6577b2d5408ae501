"""Routes of the score task: vLLM's `/score`, and the rerank paths (`/rerank`, `/v1/rerank`,
`/v2/rerank`) in Jina's, Cohere's and vLLM's shape (declared here) beside
text-embeddings-inference's (`apis/tei.py`).

`create_app` includes a router when a served model has its task (see `server/model_routes.py`).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
from fastapi import APIRouter, Request
from starlette.responses import Response

from poolserve.engine.tokenizer import Side
from poolserve.errors import InvalidRequestError
from poolserve.server.apis.tei.endpoints import RERANK_SHAPES
from poolserve.server.body import parse_body
from poolserve.server.endpoint import Call, Endpoint, Inputs, Served, router_of
from poolserve.server.handlers import serve_task, state_of
from poolserve.server.protocol import RerankRequest, ScoreRequest
from poolserve.server.schemas import RerankResponse, ScoreResponse, documented
from poolserve.server.wire import vllm
from poolserve.service import ModelService
from poolserve.tasks.base import Encoder, PoolingParams
from poolserve.tasks.score import ScoreRequest as ScoreInternal
from poolserve.tasks.score import pair_up

score_router = APIRouter()


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


def _rerank(call: Call[RerankRequest]) -> Served:
    wire, service = call.wire, call.service
    task = service.tasks.score
    assert task is not None  # model_for chose a model that serves this route
    try:
        documents = wire.document_texts()
    except ValueError as exc:
        raise InvalidRequestError(str(exc), param="documents") from None
    internal = ScoreInternal(
        queries=[wire.query],
        documents=documents,
        pairs=pair_up(1, len(documents)),
        rerank=True,
        max_tokens_per_doc=wire.max_tokens_per_doc,
        scorer=wire.scorer,
    )
    params = _params(
        service,
        truncate_prompt_tokens=wire.truncate_prompt_tokens,
        truncation_side=wire.truncation_side,
        use_activation=wire.use_activation,
    )
    encode = partial(
        vllm.rerank_body,
        documents=documents,
        top_n=wire.top_n,
        return_documents=wire.return_documents,
    )
    return Served(task, internal, params, encode, wire.request_timeout)


DOCUMENTS = Inputs[Any]("documents", lambda wire: len(wire.documents))
RERANK = [
    Endpoint(path, RerankRequest, RerankResponse, _rerank, DOCUMENTS, "rerank")
    for path in ("/rerank", "/v1/rerank", "/v2/rerank")
]
router_of([*RERANK, *RERANK_SHAPES], into=score_router)
