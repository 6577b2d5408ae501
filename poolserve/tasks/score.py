"""Scoring text pairs, and reranking documents for a query, with whatever kind of model is loaded.

- cross-encoder (cross_encoder_score.py): each (query, document) pair is one input; score = the
  model's activation (sigmoid) of its logit, or the raw logit with `use_activation: false`;
- embedding model (bi-encoder): every text is embedded once; score = cosine similarity;
- late interaction (ColBERT): every text is encoded once into token vectors; score = MaxSim
  (for each query token its best document token, summed).

Pairs are formed 1:1, 1:N (one query, N documents) or N:N (zipped).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from poolserve.engine.context import ServeContext
from poolserve.errors import InvalidRequestError, PayloadTooLargeError
from poolserve.inputs.images.policy import MediaPolicy
from poolserve.inputs.images.sources import ImageInput, has_images, image_count
from poolserve.inputs.tokenizer import TextTokenizer, TokenizedText
from poolserve.models.kinds import Head
from poolserve.tasks.image_inputs import with_images
from poolserve.tasks.input_steps import l2_normalize, param_of, tokenize_inputs

# How errors name a query and a document: each a format taking its index in its list, or
# without "{}" a request's one query (a rerank's "query", TEI's "source_sentence").
SCORE_NAMES = ("queries[{}]", "documents[{}]")
RERANK_NAMES = ("query", "documents[{}]")


@dataclass(frozen=True)
class ScoreRequest:
    queries: list[str]
    # Texts, or for an image-text model also images (`ImageInput`).
    documents: list[str] | list[str | ImageInput]
    # (query index, document index) of each score, in response order.
    pairs: list[tuple[int, int]]
    # Documents are cut to this many tokens (their own, special tokens not counted) before
    # anything else (Cohere's option).
    max_tokens_per_doc: int | None = None
    # A document too long for the model is cut to the room beside its query, not refused: the
    # rerank APIs' default, as Cohere, Jina and Voyage do.
    fit_documents: bool = False
    # How errors name a query and a document (SCORE_NAMES' forms).
    names: tuple[str, str] = SCORE_NAMES
    # One of the model's ways of scoring (`Scorer.names`: BGE-M3's dense, sparse, colbert or
    # m3); None: its default.
    scorer: str | None = None
    # What image documents may be and come from.
    media: MediaPolicy = field(default_factory=MediaPolicy)


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

    # The request's `scorer` values it takes, the default first; empty: it scores one way.
    names: tuple[str, ...]

    def inputs(self, request: ScoreRequest) -> Sequence[Any]: ...

    def preprocess(
        self,
        ctx: ServeContext[ScoreRequest],
        tokenizer: TextTokenizer,
        start: int,
        inputs: Sequence[Any],
    ) -> list[TokenizedText]: ...

    def scores(self, ctx: ServeContext[ScoreRequest], outputs: list[np.ndarray]) -> np.ndarray: ...


def _texts(request: ScoreRequest) -> list[str]:
    """Queries then documents: each text is encoded once, whatever it is scored against."""
    return [*request.queries, *request.documents]


def text_namer(request: ScoreRequest) -> Callable[[int], str]:
    """Names an index into `_texts(request)` as the request does: "queries[0]" ("query" for a
    rerank), "documents[3]"."""
    queries = len(request.queries)
    query, documents = request.names

    def name(index: int) -> str:
        return documents.format(index - queries) if index >= queries else query.format(index)

    return name


def document_position(request: ScoreRequest) -> Callable[[int], int | None]:
    """An index into `_texts(request)` as the position in the request's list an error names:
    a document's in its list, a query's in its list (None for a request's one query)."""
    queries = len(request.queries)
    listed_queries = "{}" in request.names[0]

    def position(index: int) -> int | None:
        if index >= queries:
            return index - queries
        return index if listed_queries else None

    return position


def document_limit(request: ScoreRequest, room: int) -> int | None:
    """The most tokens of its own a document may keep: `max_tokens_per_doc`, and with
    `fit_documents` no more than `room`; None: uncut (refused if too long)."""
    limit = request.max_tokens_per_doc
    if not request.fit_documents:
        return limit
    return room if limit is None else min(limit, room)


def cut_documents(
    request: ScoreRequest,
    tokenizer: TextTokenizer,
    start: int,
    texts: Sequence[str],
    max_model_len: int,
) -> list[str]:
    """Cut the documents among `texts` (which begin at `start`) to `document_limit`, each
    encoded alone (its special tokens beside it)."""
    limit = document_limit(request, max_model_len - tokenizer.num_special_tokens)
    if limit is None:
        return list(texts)
    queries = len(request.queries)
    return [
        text if start + offset < queries else tokenizer.cut_text(text, limit)
        for offset, text in enumerate(texts)
    ]


class _EachTextOnce:
    """Scorers that encode every query and document once, whatever it is scored against."""

    names: tuple[str, ...] = ()

    def __init__(self, *, max_model_len: int) -> None:
        self.max_model_len = max_model_len

    def inputs(self, request: ScoreRequest) -> Sequence[Any]:
        return _texts(request)


class BiEncoderScorer(_EachTextOnce):
    # An image-text model's image documents are scored by cosine as texts are.
    takes_images = True

    def __init__(self, *, max_model_len: int, cuts_texts: bool = False) -> None:
        super().__init__(max_model_len=max_model_len)
        # A model that cuts every text to its length where the request does not say otherwise
        # (a model2vec model, as model2vec does): queries and documents are cut, not refused.
        self.cuts_texts = cuts_texts

    def preprocess(
        self,
        ctx: ServeContext[ScoreRequest],
        tokenizer: TextTokenizer,
        start: int,
        inputs: Sequence[Any],
    ) -> list[TokenizedText]:
        if has_images(inputs):
            return with_images(
                tokenizer,
                start,
                inputs,
                media=ctx.request.media,
                name=text_namer(ctx.request),
                texts=lambda at, run: self.tokenize(ctx, tokenizer, at, run, "embed"),
            )
        return self.tokenize(ctx, tokenizer, start, inputs, "embed")

    def tokenize(
        self,
        ctx: ServeContext[ScoreRequest],
        tokenizer: TextTokenizer,
        start: int,
        inputs: Sequence[Any],
        head: Head,
    ) -> list[TokenizedText]:
        """Each text of the chunk, for `head`."""
        request, truncate = ctx.request, ctx.pooling_params.truncate_prompt_tokens
        if truncate is None and (request.fit_documents or self.cuts_texts):
            # Documents were cut to fit; this guards the edge of a cut, where tokenizing a
            # prefix can give a token more than counted.
            truncate = self.max_model_len
        return tokenize_inputs(
            tokenizer,
            cut_documents(request, tokenizer, start, inputs, self.max_model_len),
            start,
            truncate=truncate,
            max_model_len=self.max_model_len,
            head=head,
            name=text_namer(request),
            position=document_position(request),
            side=ctx.pooling_params.truncation_side,
        )

    def scores(self, ctx: ServeContext[ScoreRequest], outputs: list[np.ndarray]) -> np.ndarray:
        request = ctx.request
        vectors = l2_normalize(np.stack(outputs).astype(np.float64))
        offset = len(request.queries)
        cosines = np.array([vectors[q] @ vectors[offset + d] for q, d in request.pairs])
        # Rounding can carry a cosine past 1 (1.0000000000000002 for a text with itself).
        clipped: np.ndarray = np.clip(cosines, -1.0, 1.0)
        return clipped


@dataclass(frozen=True)
class LateInteractionConfig:
    """How a late-interaction model (PyLate's ColBERT layout) marks and shapes its inputs."""

    # Token ids put right after [CLS] to mark a query or a document.
    query_marker: int | None = None
    document_marker: int | None = None
    # Queries are cut to `query_length` tokens (marker included). With query expansion
    # (`mask_token` set) shorter ones are padded with [MASK] to exactly that length, the padding
    # attended to only with `attend_to_expansion`; every position is scored.
    query_length: int | None = None
    mask_token: int | None = None
    attend_to_expansion: bool = False
    # Document tokens left out of MaxSim (PyLate's punctuation skiplist).
    skiplist: frozenset[int] = frozenset()


class LateInteractionScorer(_EachTextOnce):
    def __init__(self, *, max_model_len: int, config: LateInteractionConfig) -> None:
        super().__init__(max_model_len=max_model_len)
        self.config = config

    def preprocess(
        self,
        ctx: ServeContext[ScoreRequest],
        tokenizer: TextTokenizer,
        start: int,
        inputs: Sequence[Any],
    ) -> list[TokenizedText]:
        request, truncate = ctx.request, ctx.pooling_params.truncate_prompt_tokens
        if truncate is None and request.fit_documents:
            truncate = self.max_model_len  # the guard at a cut's edge, as BiEncoderScorer's
        queries = len(request.queries)
        results = []
        texts = cut_documents(request, tokenizer, start, inputs, self.max_model_len)
        for offset, text in enumerate(texts):
            index = start + offset
            is_query = index < queries
            marker = self.config.query_marker if is_query else self.config.document_marker
            # As PyLate: the length limit applies to the tokenizer's output; the marker is extra.
            (tokenized,) = tokenize_inputs(
                tokenizer,
                [text],
                index,
                truncate=truncate,
                max_model_len=self.max_model_len,
                head="token_embed",
                name=text_namer(request),
                position=document_position(request),
                side=ctx.pooling_params.truncation_side,
            )
            ids = tokenized.input_ids
            if marker is not None:
                ids = [ids[0], marker, *ids[1:]]
            if is_query:
                results.append(self._expand_query(ids))
                continue
            if self.config.skiplist:
                ctx.item_data[index] = np.array([i not in self.config.skiplist for i in ids])
            results.append(TokenizedText(ids, None, "token_embed"))
        return results

    def _expand_query(self, ids: list[int]) -> TokenizedText:
        config = self.config
        length, mask = config.query_length, config.mask_token
        if length is None:
            return TokenizedText(ids, None, "token_embed")
        if len(ids) > length:
            ids = [*ids[: length - 1], ids[-1]]  # keep [SEP]
        if mask is None:
            return TokenizedText(ids, None, "token_embed")
        padding = length - len(ids)
        attention = [1] * len(ids) + [int(config.attend_to_expansion)] * padding
        return TokenizedText([*ids, *[mask] * padding], None, "token_embed", attention)

    def scores(self, ctx: ServeContext[ScoreRequest], outputs: list[np.ndarray]) -> np.ndarray:
        request = ctx.request
        tokens = [l2_normalize(output.astype(np.float32)) for output in outputs]
        offset = len(request.queries)

        def document(index: int) -> np.ndarray:
            keep = ctx.item_data.get(offset + index)
            vectors = tokens[offset + index]
            return vectors if keep is None else vectors[keep]

        return np.array([maxsim(tokens[q], document(d)) for q, d in request.pairs])


def maxsim(query: np.ndarray, document: np.ndarray) -> float:
    """Sum over query tokens of the best dot product with any document token."""
    return float((query @ document.T).max(axis=1).sum())


class ScoreTask:
    """Task processor for `/score` and `/rerank`, over one of the scorers above."""

    def __init__(self, scorer: Scorer) -> None:
        self.scorer = scorer

    def inputs(self, ctx: ServeContext[ScoreRequest]) -> Sequence[Any]:
        request = ctx.request
        documents = param_of(request.names[1])
        if not getattr(self.scorer, "takes_images", False) and has_images(request.documents):
            raise InvalidRequestError(
                f"{documents} hold an image, and this model scores text only; send images to an "
                "image-text model (CLIP, SigLIP)",
                param=documents,
            )
        images = image_count(request.documents)
        if images > request.media.max_images:
            raise PayloadTooLargeError(
                f"{documents} hold {images} images, more than the {request.media.max_images} one "
                "request may have here (--max-images-per-request); split it",
                param=documents,
            )
        chosen, names = ctx.request.scorer, self.scorer.names
        if chosen is not None and chosen not in names:
            raise InvalidRequestError(
                f"scorer {chosen!r} is not one of this model's: "
                + (", ".join(names) if names else "it scores one way; leave `scorer` out"),
                param="scorer",
            )
        return self.scorer.inputs(ctx.request)

    def preprocess(
        self,
        ctx: ServeContext[ScoreRequest],
        tokenizer: TextTokenizer,
        start: int,
        inputs: Sequence[Any],
    ) -> list[TokenizedText]:
        return self.scorer.preprocess(ctx, tokenizer, start, inputs)

    def postprocess(self, ctx: ServeContext[ScoreRequest], outputs: list[np.ndarray]) -> np.ndarray:
        return self.scorer.scores(ctx, outputs)


def ranked(scores: np.ndarray, top_n: int | None) -> list[tuple[int, float]]:
    """(document index, score) pairs, best first (ties: the earlier document); the first
    `top_n` (None or 0: all)."""
    order = np.argsort(-np.asarray(scores), kind="stable")
    return [(int(index), float(scores[index])) for index in order[: top_n or None]]
