"""Scoring text pairs, and reranking documents for a query, with whatever kind of model is loaded.

- cross-encoder: each (query, document) pair is one input; score = the model's activation
  (sigmoid) of its logit, or the raw logit with `use_activation: false`;
- embedding model (bi-encoder): every text is embedded once; score = cosine similarity;
- late interaction (ColBERT): every text is encoded once into token vectors; score = MaxSim
  (for each query token its best document token, summed).

Pairs are formed 1:1, 1:N (one query, N documents) or N:N (zipped).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import orjson

from poolserve.engine.tokenizer import TextTokenizer, TokenizedText
from poolserve.errors import InputTooLongError, InvalidRequestError
from poolserve.tasks.base import ServeContext
from poolserve.tasks.inputs import l2_normalize, tokenize_inputs


@dataclass(frozen=True)
class RerankOptions:
    top_n: int | None
    return_documents: bool


@dataclass(frozen=True)
class ScoreRequest:
    queries: list[str]
    documents: list[str]
    # (query index, document index) of each score, in response order.
    pairs: list[tuple[int, int]]
    rerank: RerankOptions | None = None
    # Documents are cut to this many tokens before anything else (Cohere's option).
    max_tokens_per_doc: int | None = None


def pair_up(queries: int, documents: int) -> list[tuple[int, int]]:
    """1:1, 1:N or N:N pairs; anything else is a client error that says what is allowed."""
    if queries == 0 or documents == 0:
        raise InvalidRequestError("score needs at least one query and one document")
    if queries == 1:
        return [(0, index) for index in range(documents)]
    if queries == documents:
        return [(index, index) for index in range(documents)]
    raise InvalidRequestError(
        f"got {queries} queries and {documents} documents; send 1 query with any number of "
        "documents (1:N), or as many queries as documents (N:N, scored pairwise)"
    )


class Scorer(Protocol):
    """One way of scoring: what to run through the model and how outputs become scores."""

    def inputs(self, request: ScoreRequest) -> Sequence[Any]: ...

    def preprocess(
        self,
        request: ScoreRequest,
        tokenizer: TextTokenizer,
        start: int,
        inputs: Sequence[Any],
        truncate: int | None,
    ) -> list[TokenizedText]: ...

    def scores(
        self, request: ScoreRequest, outputs: list[np.ndarray], use_activation: bool
    ) -> np.ndarray: ...


def _texts(request: ScoreRequest) -> list[str]:
    """Queries then documents: each text is encoded once, whatever it is scored against."""
    return [*request.queries, *request.documents]


def _cut_documents(
    request: ScoreRequest, tokenizer: TextTokenizer, start: int, texts: Sequence[str]
) -> list[str]:
    """Apply `max_tokens_per_doc` to the documents among `texts` (which begin at `start`)."""
    limit = request.max_tokens_per_doc
    if limit is None:
        return list(texts)
    queries = len(request.queries)
    return [
        text if start + offset < queries else tokenizer.cut_text(text, limit)
        for offset, text in enumerate(texts)
    ]


class CrossEncoderScorer:
    def __init__(self, *, max_model_len: int, sigmoid: bool) -> None:
        self.max_model_len = max_model_len
        self.sigmoid = sigmoid

    def inputs(self, request: ScoreRequest) -> Sequence[Any]:
        return request.pairs

    def preprocess(
        self,
        request: ScoreRequest,
        tokenizer: TextTokenizer,
        start: int,
        inputs: Sequence[Any],
        truncate: int | None,
    ) -> list[TokenizedText]:
        limit = request.max_tokens_per_doc
        texts = [
            (
                request.queries[query],
                request.documents[doc]
                if limit is None
                else tokenizer.cut_text(request.documents[doc], limit),
            )
            for query, doc in inputs
        ]
        encoded = tokenizer.encode_pairs(texts, truncate_to=truncate)
        for offset, (ids, _) in enumerate(encoded):
            if len(ids) > self.max_model_len:
                raise InputTooLongError(
                    f"pair {start + offset} (query and document together) has {len(ids)} "
                    f"tokens, but the model accepts at most {self.max_model_len}; pass "
                    "`truncate_prompt_tokens` (-1 for the model's maximum) or "
                    "`max_tokens_per_doc` to cut it",
                    param="documents",
                )
        return [TokenizedText(ids, types, "classify") for ids, types in encoded]

    def scores(
        self, request: ScoreRequest, outputs: list[np.ndarray], use_activation: bool
    ) -> np.ndarray:
        logits = np.stack(outputs)[:, 0].astype(np.float64)
        return 1.0 / (1.0 + np.exp(-logits)) if use_activation and self.sigmoid else logits


class BiEncoderScorer:
    def __init__(self, *, max_model_len: int) -> None:
        self.max_model_len = max_model_len

    def inputs(self, request: ScoreRequest) -> Sequence[Any]:
        return _texts(request)

    def preprocess(
        self,
        request: ScoreRequest,
        tokenizer: TextTokenizer,
        start: int,
        inputs: Sequence[Any],
        truncate: int | None,
    ) -> list[TokenizedText]:
        return tokenize_inputs(
            tokenizer,
            _cut_documents(request, tokenizer, start, inputs),
            start,
            truncate=truncate,
            max_model_len=self.max_model_len,
            head="embed",
        )

    def scores(
        self, request: ScoreRequest, outputs: list[np.ndarray], use_activation: bool
    ) -> np.ndarray:
        vectors = l2_normalize(np.stack(outputs).astype(np.float64))
        offset = len(request.queries)
        return np.array([vectors[q] @ vectors[offset + d] for q, d in request.pairs])


@dataclass(frozen=True)
class Markers:
    """Token ids a late-interaction model puts after [CLS] to mark queries and documents."""

    query: int | None = None
    document: int | None = None


class LateInteractionScorer:
    def __init__(self, *, max_model_len: int, markers: Markers) -> None:
        self.max_model_len = max_model_len
        self.markers = markers

    def inputs(self, request: ScoreRequest) -> Sequence[Any]:
        return _texts(request)

    def preprocess(
        self,
        request: ScoreRequest,
        tokenizer: TextTokenizer,
        start: int,
        inputs: Sequence[Any],
        truncate: int | None,
    ) -> list[TokenizedText]:
        marked = [self._marker(request, start + offset) for offset in range(len(inputs))]
        room = None if truncate is None else truncate - any(m is not None for m in marked)
        tokenized = tokenize_inputs(
            tokenizer,
            _cut_documents(request, tokenizer, start, inputs),
            start,
            truncate=room,
            max_model_len=self.max_model_len - any(m is not None for m in marked),
            head="token_embed",
        )
        return [
            text
            if marker is None
            else TokenizedText(
                [text.input_ids[0], marker, *text.input_ids[1:]], None, "token_embed"
            )
            for text, marker in zip(tokenized, marked, strict=True)
        ]

    def _marker(self, request: ScoreRequest, index: int) -> int | None:
        return self.markers.query if index < len(request.queries) else self.markers.document

    def scores(
        self, request: ScoreRequest, outputs: list[np.ndarray], use_activation: bool
    ) -> np.ndarray:
        tokens = [l2_normalize(output.astype(np.float32)) for output in outputs]
        offset = len(request.queries)
        return np.array(
            [maxsim(tokens[q], tokens[offset + d]) for q, d in request.pairs], dtype=np.float64
        )


def maxsim(query: np.ndarray, document: np.ndarray) -> float:
    """Sum over query tokens of the best dot product with any document token."""
    return float((query @ document.T).max(axis=1).sum())


class ScoreTask:
    """Task processor for `/score` and `/rerank`, over one of the scorers above."""

    def __init__(self, scorer: Scorer) -> None:
        self.scorer = scorer

    def inputs(self, ctx: ServeContext[ScoreRequest]) -> Sequence[Any]:
        return self.scorer.inputs(ctx.request)

    def preprocess(
        self,
        ctx: ServeContext[ScoreRequest],
        tokenizer: TextTokenizer,
        start: int,
        inputs: Sequence[Any],
    ) -> list[TokenizedText]:
        truncate = ctx.pooling_params.truncate_prompt_tokens
        return self.scorer.preprocess(ctx.request, tokenizer, start, inputs, truncate)

    def postprocess(self, ctx: ServeContext[ScoreRequest], outputs: list[np.ndarray]) -> np.ndarray:
        return self.scorer.scores(ctx.request, outputs, ctx.pooling_params.use_activation)

    def build_response(self, ctx: ServeContext[ScoreRequest], result: np.ndarray) -> bytes:
        usage = {"prompt_tokens": ctx.prompt_tokens, "total_tokens": ctx.prompt_tokens}
        rerank = ctx.request.rerank
        if rerank is None:
            body: dict[str, Any] = {
                "id": f"score-{ctx.request_id}",
                "object": "list",
                "created": ctx.timings.created,
                "model": ctx.model_name,
                "data": [
                    {"index": index, "object": "score", "score": float(score)}
                    for index, score in enumerate(result)
                ],
                "usage": usage,
            }
        else:
            order = np.argsort(-result, kind="stable")
            if rerank.top_n:
                order = order[: rerank.top_n]
            documents = ctx.request.documents
            body = {
                "id": f"rerank-{ctx.request_id}",
                "model": ctx.model_name,
                "results": [
                    {
                        "index": int(index),
                        "relevance_score": float(result[index]),
                        **(
                            {"document": {"text": documents[index]}}
                            if rerank.return_documents
                            else {}
                        ),
                    }
                    for index in order
                ],
                "usage": usage,
            }
        return orjson.dumps(body)
