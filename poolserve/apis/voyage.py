"""Voyage AI's API (`POST /v1/embeddings` and `/v1/rerank` in Voyage's shape, which its `voyageai`
client sends): `input_type` picks the model's query or document prompt, `output_dtype` the
compact types, `output_dimension` a Matryoshka prefix, `truncation` whether a long input is cut
or refused. Its errors take Voyage's shape, `{"detail"}`.

Both paths are other families' too (OpenAI's embeddings, the shared rerank shape): a body with
one of Voyage's own fields (its client sends them all) is Voyage's.
"""

from __future__ import annotations

import base64
from functools import partial
from typing import Annotated, Any, Literal

import numpy as np
import orjson
from pydantic import Field, StrictBool, StrictInt, StrictStr

from poolserve.apis.answer_docs import Documented
from poolserve.apis.declarations import (
    Call,
    Endpoint,
    ErrorShape,
    Inputs,
    Served,
    embedders,
    scorers,
)
from poolserve.apis.envelope import embedding_space_field
from poolserve.apis.request_bodies import WireModel
from poolserve.engine.context import PoolingOptions, ServeContext
from poolserve.service.model_service import ModelService
from poolserve.serving.serving_step import Vectors
from poolserve.tasks.embed import EmbedRequest
from poolserve.tasks.quantize import quantize
from poolserve.tasks.score import RERANK_NAMES, ScoreRequest, pair_up, ranked

OutputDType = Literal["float", "int8", "uint8", "binary", "ubinary"]
# Voyage's input types, as the Cohere names the model's prompts are looked up by.
_INPUT_TYPES = {"query": "search_query", "document": "search_document"}
TRUNCATION = "`truncation: true`"

# -- the requests --------------------------------------------------------------------------------


class VoyageEmbedRequest(WireModel):
    """Voyage AI `POST /v1/embeddings`."""

    input: StrictStr | Annotated[list[StrictStr], Field(min_length=1)] = Field(
        description="a string or a non-empty array of strings"
    )
    model: StrictStr | None = None
    input_type: Literal["query", "document"] | None = Field(
        None,
        description="puts the model's query or document prompt before each text (docs: Models "
        "and kinds, prompts); null: the model's default prompt",
    )
    truncation: StrictBool = Field(
        True, description="cut inputs longer than the model takes (false: refuse them)"
    )
    output_dimension: Annotated[StrictInt, Field(ge=1)] | None = Field(
        None, description="keep the first N dimensions (then re-normalize)"
    )
    output_dtype: OutputDType = Field(
        "float",
        description="the numbers' type (docs: Routes by API family, compact embedding types)",
    )
    encoding_format: Literal["base64"] | None = Field(
        None, description="base64: each vector's bytes in output_dtype (float: float32)"
    )

    def texts(self) -> list[str]:
        return [self.input] if isinstance(self.input, str) else self.input


class VoyageRerankRequest(WireModel):
    """Voyage AI `POST /v1/rerank`."""

    query: StrictStr
    documents: list[StrictStr] = Field(min_length=1)
    model: StrictStr | None = None
    top_k: Annotated[StrictInt, Field(ge=1)] | None = Field(
        None, description="answer the k best documents only"
    )
    return_documents: StrictBool = False
    truncation: StrictBool = Field(
        True, description="cut a query and document longer than the model takes (false: refuse)"
    )


_VOYAGE_ONLY = {
    "/v1/embeddings": frozenset({"input_type", "truncation", "output_dimension", "output_dtype"}),
    "/v1/rerank": frozenset({"top_k", "truncation"}),
}


def _is_voyage(path: str, data: Any, service: ModelService) -> bool:
    return isinstance(data, dict) and not _VOYAGE_ONLY[path].isdisjoint(data)


# -- the answers ---------------------------------------------------------------------------------


class DetailErrorBody(Documented):
    """Voyage AI's error shape (FastAPI's), on its bodies."""

    detail: str = Field(description="what went wrong and how to fix the request")


def detail_error_body(status: int, message: str) -> bytes:
    return orjson.dumps({"detail": message})


VOYAGE_ERRORS = ErrorShape(DetailErrorBody, detail_error_body)


class VoyageEmbedding(Documented):
    object: Literal["embedding"]
    embedding: list[float] | list[int] | str = Field(
        description="numbers in output_dtype, or with encoding_format base64 their bytes"
    )
    index: int


class VoyageUsage(Documented):
    total_tokens: int


class VoyageEmbedResponse(Documented):
    object: Literal["list"]
    data: list[VoyageEmbedding]
    model: str
    usage: VoyageUsage
    embedding_space: str | None = Field(
        description="the fingerprint of the space its vectors live in, as the x-embedding-space "
        "header carries it (README: the embedding space); absent where it has no vectors",
    )


class VoyageRerankResult(Documented):
    index: int = Field(description="the document's position in the request")
    relevance_score: float
    document: str | None = Field(None, description="with return_documents true")


class VoyageRerankResponse(Documented):
    object: Literal["list"]
    data: list[VoyageRerankResult] = Field(description="best first")
    model: str
    usage: VoyageUsage


def _typed(vectors: np.ndarray, output_dtype: OutputDType) -> np.ndarray:
    if output_dtype == "float":
        return np.ascontiguousarray(vectors, "<f4")
    return quantize(vectors, output_dtype)


def embed_body(
    ctx: ServeContext[Any],
    vectors: np.ndarray,
    *,
    output_dtype: OutputDType,
    encoding_format: Literal["base64"] | None,
) -> bytes:
    """Each vector as numbers in `output_dtype`, or base64 of their bytes (little-endian
    float32 for float; a byte each for the compact types), as the client decodes them."""
    typed = _typed(vectors, output_dtype)
    embeddings: list[Any]
    if encoding_format == "base64":
        embeddings = [base64.b64encode(row.tobytes()).decode("ascii") for row in typed]
    else:
        embeddings = list(typed)
    body = {
        "object": "list",
        "data": [
            {"object": "embedding", "embedding": embedding, "index": index}
            for index, embedding in enumerate(embeddings)
        ],
        "model": ctx.model_name,
        "usage": {"total_tokens": ctx.prompt_tokens},
        **embedding_space_field(ctx),
    }
    return orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY)


def rerank_body(
    ctx: ServeContext[Any],
    scores: np.ndarray,
    *,
    documents: list[str],
    top_k: int | None,
    return_documents: bool,
) -> bytes:
    data: list[dict[str, Any]] = []
    for index, score in ranked(scores, top_k):
        entry: dict[str, Any] = {"index": index, "relevance_score": score}
        if return_documents:
            entry["document"] = documents[index]
        data.append(entry)
    body = {
        "object": "list",
        "data": data,
        "model": ctx.model_name,
        "usage": {"total_tokens": ctx.prompt_tokens},
    }
    return orjson.dumps(body)


# -- the endpoints -------------------------------------------------------------------------------


def _embed(call: Call[VoyageEmbedRequest]) -> Served:
    wire, service = call.wire, call.service
    embed = service.tasks.embed
    assert embed is not None  # model_for chose a model that serves this route
    params = service.pooling_params(
        PoolingOptions(
            dimensions=wire.output_dimension,
            truncate_prompt_tokens=-1 if wire.truncation else None,
        )
    )
    prompt = service.tasks.prompts.for_input_type(_INPUT_TYPES.get(wire.input_type or ""))
    encode = partial(
        embed_body, output_dtype=wire.output_dtype, encoding_format=wire.encoding_format
    )
    internal = EmbedRequest(wire.texts(), prompt)
    vectors = Vectors(types=(wire.output_dtype,))
    return Served(embed, internal, params, encode, wire.request_timeout, vectors=vectors)


def _rerank(call: Call[VoyageRerankRequest]) -> Served:
    wire, service = call.wire, call.service
    task = service.tasks.score
    assert task is not None  # model_for chose a model that serves this route
    documents = wire.documents
    internal = ScoreRequest([wire.query], documents, pair_up(1, len(documents)), names=RERANK_NAMES)
    params = service.pooling_params(
        PoolingOptions(truncate_prompt_tokens=-1 if wire.truncation else None)
    )
    encode = partial(
        rerank_body, documents=documents, top_k=wire.top_k, return_documents=wire.return_documents
    )
    return Served(task, internal, params, encode, wire.request_timeout)


ENDPOINTS = [
    Endpoint(
        "/v1/embeddings",
        VoyageEmbedRequest,
        VoyageEmbedResponse,
        _embed,
        Inputs("input", lambda wire: len(wire.texts()), cut_with=TRUNCATION),
        "create_embeddings",
        serves=embedders,
        errors=VOYAGE_ERRORS,
        matches=partial(_is_voyage, "/v1/embeddings"),
    ),
    Endpoint(
        "/v1/rerank",
        VoyageRerankRequest,
        VoyageRerankResponse,
        _rerank,
        Inputs("documents", lambda wire: len(wire.documents), cut_with=TRUNCATION),
        "rerank",
        serves=scorers,
        errors=VOYAGE_ERRORS,
        matches=partial(_is_voyage, "/v1/rerank"),
    ),
]
