"""vLLM's pooling API beyond embeddings: `POST /classify` (a classifier's labels and
probabilities), `POST /score` (pairs' scores, 1:1, 1:N or N:N) and `POST /pooling` (the raw
output of any of the model's heads): the request schemas, the answers (documented and encoded)
and the endpoints. vLLM's rerank shape, which Jina and Cohere share, is `apis/rerank.py`'s."""

from __future__ import annotations

from functools import partial
from typing import Any, Literal

import numpy as np
from pydantic import Field, StrictBool, StrictStr

from poolserve.apis.answer_docs import Documented, ListEnvelope, SparseEntry
from poolserve.apis.declarations import Call, Endpoint, Inputs, Served, classifiers, scorers
from poolserve.apis.envelope import EncodingFormat, base64_float32, list_body
from poolserve.apis.request_bodies import (
    TEXT_OR_TEXTS,
    InputRequest,
    Part,
    ScoringRequest,
    StrictModel,
    TextOrTexts,
    parts_of,
)
from poolserve.engine.context import PoolingOptions, PoolingParams, ServeContext
from poolserve.errors import InvalidRequestError
from poolserve.inputs.images.sources import ImageInput, named_images
from poolserve.models.kinds import Head
from poolserve.service.model_service import ModelService
from poolserve.serving.serving_step import Vectors
from poolserve.tasks.classify import ClassifyRequest as ClassifyInternal
from poolserve.tasks.pooling import PoolingRequest as PoolingInternal
from poolserve.tasks.score import ScoreRequest as ScoreInternal
from poolserve.tasks.score import pair_up

# The outputs of `/pooling` that are vectors in a space (models/embedding_space.py).
VECTOR_HEADS = ("embed", "token_embed", "sparse", "image_embed")

# -- the requests --------------------------------------------------------------------------------


class ClassifyRequest(InputRequest):
    """vLLM `POST /classify`."""


class ScoreContent(StrictModel):
    """vLLM's multimodal documents: each content part one document (a text or an image)."""

    content: list[Part] = Field(min_length=1)


# vLLM's multimodal form: each content part (a text, an image_url) one document.
DOCUMENTS_DESCRIPTION = TEXT_OR_TEXTS + ' (an image-text model\'s also {"content": [parts]})'
Documents = TextOrTexts | ScoreContent


class ScoreRequest(ScoringRequest):
    """vLLM `POST /score`: `queries`/`documents` (or `text_1`/`text_2`), 1:1, 1:N or N:N."""

    model: StrictStr | None = None
    queries: TextOrTexts | None = Field(default=None, description=TEXT_OR_TEXTS)
    documents: Documents | None = Field(default=None, description=DOCUMENTS_DESCRIPTION)
    text_1: TextOrTexts | None = Field(default=None, description=TEXT_OR_TEXTS)
    text_2: Documents | None = Field(default=None, description=DOCUMENTS_DESCRIPTION)

    def fields(self) -> tuple[str, str]:
        """The fields that hold the queries and the documents: `queries`/`text_1`,
        `documents`/`text_2` (vLLM's older names); one of each pair, not both."""
        for name, older in (("queries", "text_1"), ("documents", "text_2")):
            if getattr(self, name) is not None and getattr(self, older) is not None:
                raise InvalidRequestError(
                    f"send `{name}` or `{older}` (its older name), not both", param=older
                )
        sent_new = self.queries is not None or self.documents is not None
        if not sent_new and (self.text_1 is not None or self.text_2 is not None):
            return "text_1", "text_2"
        return (
            "queries" if self.text_1 is None else "text_1",
            "documents" if self.text_2 is None else "text_2",
        )

    def sides(self) -> tuple[list[str], list[str | ImageInput]]:
        first_field, second_field = self.fields()
        first, second = getattr(self, first_field), getattr(self, second_field)
        if first is None or second is None:
            raise InvalidRequestError(
                "send `queries` and `documents` (or `text_1` and `text_2`)",
                param=first_field if first is None else second_field,
            )
        queries = [first] if isinstance(first, str) else first
        if isinstance(second, ScoreContent):
            return queries, parts_of(second.content)
        return queries, [second] if isinstance(second, str) else list(second)


class PoolingRequest(InputRequest):
    """vLLM `POST /pooling`: the raw output of one of the model's heads."""

    task: Literal["embed", "classify", "token_embed", "token_classify", "sparse"] | None = None
    normalize: StrictBool | None = None
    encoding_format: Literal["float", "base64"] = "float"


# -- the answers ---------------------------------------------------------------------------------


class ClassifyItem(Documented):
    index: int
    label: str | None
    probs: list[float] = Field(description="probabilities (raw logits with use_activation false)")
    num_classes: int


class ClassifyResponse(ListEnvelope):
    data: list[ClassifyItem]


class ScoreItem(Documented):
    object: Literal["score"]
    index: int
    score: float


class ScoreResponse(ListEnvelope):
    data: list[ScoreItem]


class PoolingItem(Documented):
    object: Literal["pooling"]
    index: int
    data: list[float] | list[list[float]] | list[SparseEntry] | str = Field(
        description="the head's output: a vector, a vector per token, sparse entries, or "
        "base64 float32 bytes"
    )
    labels: list[str] | None = Field(
        default=None, description="token_classify: each token's most likely label"
    )


class PoolingResponse(ListEnvelope):
    data: list[PoolingItem]


def classify_body(
    ctx: ServeContext[Any], probabilities: np.ndarray, *, labels: tuple[str, ...]
) -> bytes:
    data = [
        {
            "index": index,
            "label": labels[int(np.argmax(row))] if len(labels) == len(row) else None,
            "probs": row.astype(np.float32),
            "num_classes": len(row),
        }
        for index, row in enumerate(probabilities)
    ]
    return list_body(ctx, "classify", data)


def score_body(ctx: ServeContext[Any], scores: np.ndarray) -> bytes:
    data = [
        {"index": index, "object": "score", "score": float(score)}
        for index, score in enumerate(scores)
    ]
    return list_body(ctx, "score", data)


def pooling_body(
    ctx: ServeContext[Any],
    outputs: list[Any],
    *,
    head: Head,
    encoding_format: EncodingFormat,
    labels: tuple[str, ...] | None,
) -> bytes:
    """`/pooling`: each input's output of `head` (sparse: `{index, value}` entries)."""
    data: list[dict[str, Any]] = []
    base64_arrays = encoding_format == "base64" and head != "sparse"
    for index, output in enumerate(outputs):
        encoded = base64_float32(output) if base64_arrays else output
        entry: dict[str, Any] = {"index": index, "object": "pooling", "data": encoded}
        if head == "token_classify" and labels is not None:
            entry["labels"] = [labels[int(i)] for i in np.argmax(output, -1)]
        data.append(entry)
    return list_body(ctx, "pool", data)


# -- the endpoints -------------------------------------------------------------------------------


def _params(
    service: ModelService, wire: InputRequest | ScoreRequest, normalize: bool | None = None
) -> PoolingParams:
    return service.pooling_params(
        PoolingOptions(
            normalize=normalize,
            truncate_prompt_tokens=wire.truncate_prompt_tokens,
            truncation_side=wire.truncation_side,
            use_activation=wire.use_activation is not False,
        )
    )


def _classify(call: Call[ClassifyRequest]) -> Served:
    wire, service = call.wire, call.service
    task = service.tasks.classify
    assert task is not None  # model_for chose a model that serves this route
    encode = partial(classify_body, labels=task.classifier.labels)
    internal = ClassifyInternal(wire.inputs())
    return Served(task, internal, _params(service, wire), encode, wire.request_timeout)


def _score(call: Call[ScoreRequest]) -> Served:
    wire, service = call.wire, call.service
    task = service.tasks.score
    assert task is not None  # model_for chose a model that serves this route
    queries, documents = wire.sides()
    query_field, document_field = wire.fields()
    internal = ScoreInternal(
        queries=queries,
        documents=documents,
        pairs=pair_up(len(queries), len(documents)),
        names=(f"{query_field}[{{}}]", f"{document_field}[{{}}]"),
        max_tokens_per_doc=wire.max_tokens_per_doc,
        scorer=wire.scorer,
        media=call.state.media,
    )
    images = named_images(documents, f"{document_field}[{{}}]")
    params = _params(service, wire)
    return Served(task, internal, params, score_body, wire.request_timeout, images)


def _pooling(call: Call[PoolingRequest]) -> Served:
    wire, service = call.wire, call.service
    heads = service.tasks.heads
    head = wire.task or heads[0]
    if head not in heads:
        raise InvalidRequestError(
            f"Unsupported task {head!r} for this {service.kind} model; it supports: "
            + ", ".join(heads),
            param="task",
        )
    pooling = service.tasks.pooling
    encode = partial(
        pooling_body,
        head=head,
        encoding_format=wire.encoding_format,
        labels=pooling.classifier.labels if pooling.classifier is not None else None,
    )
    params = _params(service, wire, normalize=wire.normalize)
    internal = PoolingInternal(wire.inputs(), head)
    vectors = Vectors(head) if head in VECTOR_HEADS else None
    return Served(pooling, internal, params, encode, wire.request_timeout, vectors=vectors)


def _count(wire: InputRequest) -> int:
    return wire.input_count()


INPUTS = Inputs[Any]("input", _count)
QUERIES = Inputs[ScoreRequest](
    "queries", lambda wire: len(wire.sides()[0]), field_in=lambda wire: wire.fields()[0]
)
DOCUMENTS = Inputs[ScoreRequest](
    "documents", lambda wire: len(wire.sides()[1]), field_in=lambda wire: wire.fields()[1]
)
ENDPOINTS = [
    Endpoint(
        "/classify",
        ClassifyRequest,
        ClassifyResponse,
        _classify,
        INPUTS,
        "classify",
        serves=classifiers,
    ),
    *[
        Endpoint(
            path,
            ScoreRequest,
            ScoreResponse,
            _score,
            QUERIES,
            "score",
            serves=scorers,
            more_inputs=(DOCUMENTS,),
        )
        for path in ("/score", "/v1/score")
    ],
    Endpoint("/pooling", PoolingRequest, PoolingResponse, _pooling, INPUTS, "pooling"),
]
