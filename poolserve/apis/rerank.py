"""The rerank API vLLM, Jina and Cohere share (`POST /rerank`, `/v1/rerank`, `/v2/rerank`: a
query and documents, answered best first), over the score task: its request schema, its answer
(documented and encoded) and its endpoints. Other families' shapes of the same paths
(text-embeddings-inference's `texts`, Voyage AI's `top_k`) are declared in theirs."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Annotated, Any

import numpy as np
import orjson
from pydantic import Field, StrictBool, StrictInt, StrictStr, model_validator

from poolserve.apis.answer_docs import Documented, Usage
from poolserve.apis.declarations import Call, Endpoint, Inputs, Served, scorers
from poolserve.apis.envelope import usage
from poolserve.apis.request_bodies import IMAGE_SOURCE, ScoringRequest, StrictModel
from poolserve.engine.context import PoolingOptions, ServeContext
from poolserve.inputs.images.sources import ImageInput, named_images
from poolserve.tasks.score import RERANK_NAMES, ScoreRequest, pair_up, ranked

PATHS = ("/rerank", "/v1/rerank", "/v2/rerank")

# -- the request ---------------------------------------------------------------------------------


class RerankDocument(StrictModel):
    """A document: its `text`, or (Jina's form, for an image-text model: CLIP, SigLIP) its
    `image`."""

    text: StrictStr | None = None
    image: StrictStr | None = Field(None, description=IMAGE_SOURCE)

    @model_validator(mode="after")
    def _one_of_them(self) -> RerankDocument:
        if (self.text is None) == (self.image is None):
            raise ValueError("a document object has a `text` or an `image`, one of them")
        return self


class RerankRequest(ScoringRequest):
    """`POST /rerank`, `/v1/rerank`, `/v2/rerank` (Jina / Cohere shape)."""

    model: StrictStr | None = None
    query: StrictStr
    documents: list[StrictStr | RerankDocument] = Field(
        min_length=1,
        description="an array of strings or of objects with a `text` string (or, for an "
        "image-text model, an `image`)",
    )
    top_n: Annotated[StrictInt, Field(ge=0)] | None = None
    return_documents: StrictBool = True

    def document_inputs(self) -> list[str | ImageInput]:
        """The documents: texts, and images (`ImageInput`)."""
        return [
            doc if isinstance(doc, str) else doc.text or ImageInput(doc.image)
            for doc in self.documents
        ]


# -- the answer ----------------------------------------------------------------------------------


class RerankedDocument(Documented):
    text: str | None = Field(default=None, description="a text document")
    image: str | None = Field(default=None, description="an image document, as it was sent")


class RerankResult(Documented):
    index: int = Field(description="the document's position in the request")
    relevance_score: float
    document: RerankedDocument | None = Field(
        default=None, description="absent with return_documents false"
    )


class RerankResponse(Documented):
    id: str
    model: str
    results: list[RerankResult] = Field(description="best first")
    usage: Usage


def rerank_body(
    ctx: ServeContext[Any],
    scores: np.ndarray,
    *,
    documents: Sequence[str | ImageInput],
    top_n: int | None,
    return_documents: bool,
) -> bytes:
    results: list[dict[str, Any]] = []
    for index, score in ranked(scores, top_n):
        entry: dict[str, Any] = {"index": index, "relevance_score": score}
        if return_documents:
            document = documents[index]
            entry["document"] = (
                {"text": document} if isinstance(document, str) else {"image": document.source}
            )
        results.append(entry)
    return orjson.dumps(
        {
            "id": f"rerank-{ctx.request_id}",
            "model": ctx.model_name,
            "results": results,
            "usage": usage(ctx),
        }
    )


# -- the endpoints -------------------------------------------------------------------------------


def _rerank(call: Call[RerankRequest]) -> Served:
    wire, service = call.wire, call.service
    task = service.tasks.score
    assert task is not None  # model_for chose a model that serves this route
    documents = wire.document_inputs()
    internal = ScoreRequest(
        queries=[wire.query],
        documents=documents,
        pairs=pair_up(1, len(documents)),
        names=RERANK_NAMES,
        max_tokens_per_doc=wire.max_tokens_per_doc,
        fit_documents=True,
        scorer=wire.scorer,
        media=call.state.media,
    )
    params = service.pooling_params(
        PoolingOptions(
            truncate_prompt_tokens=wire.truncate_prompt_tokens,
            truncation_side=wire.truncation_side,
            use_activation=wire.use_activation is not False,
        )
    )
    encode = partial(
        rerank_body,
        documents=documents,
        top_n=wire.top_n,
        return_documents=wire.return_documents,
    )
    images = named_images(documents, "documents[{}]")
    return Served(task, internal, params, encode, wire.request_timeout, images)


DOCUMENTS = Inputs[RerankRequest]("documents", lambda wire: len(wire.documents))
ENDPOINTS = [
    Endpoint(path, RerankRequest, RerankResponse, _rerank, DOCUMENTS, "rerank", serves=scorers)
    for path in PATHS
]
