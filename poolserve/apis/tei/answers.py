"""text-embeddings-inference's answers: documented (for `/docs`) and encoded (bare lists, no
envelope), and its errors (`{"error", "error_type"}`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
from pydantic import Field, RootModel

from poolserve.apis.answer_docs import Documented, SparseEntry
from poolserve.apis.declarations import ErrorShape
from poolserve.engine.context import ServeContext
from poolserve.inputs.tokenizer import TextTokenizer
from poolserve.tasks.score import ranked

_ERROR_TYPES = {429: "Overloaded", 500: "Backend", 503: "Unhealthy", 504: "Backend"}


class TeiErrorBody(Documented):
    """text-embeddings-inference's error shape, on its routes (and on a route that also takes
    another family's body, for a TEI body)."""

    error: str = Field(description="what went wrong and how to fix the request")
    error_type: str = Field(description="Validation, Overloaded, Backend or Unhealthy")


def tei_error_body(status: int, message: str) -> bytes:
    """text-embeddings-inference's error shape: `{"error", "error_type"}`."""
    return orjson.dumps({"error": message, "error_type": _ERROR_TYPES.get(status, "Validation")})


TEI_ERRORS = ErrorShape(TeiErrorBody, tei_error_body)


class TeiEmbedResponse(RootModel[list[list[float]] | list[list[list[float]]]]):
    """text-embeddings-inference: a vector per input (`/embed`), or a vector per token of each
    input (`/embed_all`)."""


class TeiPrediction(Documented):
    score: float
    label: str


class TeiPredictResponse(RootModel[list[TeiPrediction] | list[list[TeiPrediction]]]):
    """Each input's labels with their scores, best first (one input sent as a string: its list
    alone)."""


class TeiSimilarityResponse(RootModel[list[float]]):
    """The cosine of the source sentence with each sentence."""


class TeiRerankResult(Documented):
    index: int
    score: float
    text: str | None = None


class TeiRerankResponse(RootModel[list[TeiRerankResult]]):
    """text-embeddings-inference's rerank shape, best first."""


class TeiToken(Documented):
    id: int
    text: str
    special: bool
    start: int | None
    stop: int | None


class TeiTokenizeResponse(RootModel[list[list[TeiToken]]]):
    """Each text's tokens."""


class TeiInfo(Documented):
    """text-embeddings-inference's `/info`."""

    model_id: str
    model_sha: str | None
    model_dtype: str
    model_type: dict[str, Any]
    max_concurrent_requests: int
    max_input_length: int
    max_batch_tokens: int
    max_batch_requests: int
    max_client_batch_size: int
    auto_truncate: bool
    tokenization_workers: int
    version: str
    prompts: dict[str, str]
    default_prompt_name: str | None
    precision: dict[str, Any] | None = Field(
        None,
        description="poolserve's: how --dtype auto chose model_dtype on this machine (the "
        "probe's seconds and each precision's distance from float32); null where asked for",
    )
    quantization: dict[str, Any] | None = Field(
        None,
        description="poolserve's: the quantized model's quality gate against the unquantized "
        "one (scheme, what is served, the figures over the probe, what fell short); null where "
        "nothing is quantized",
    )
    engine: dict[str, Any] | None = Field(
        None,
        description="poolserve's: how --backend auto chose the engine and precision (the one "
        "chosen, measured now or read from the cache, and each trial: sentences/s over the "
        "probe, one sentence's milliseconds, the gate's figures against torch float32, and "
        "its outcome); null where the engine was named",
    )


class SparseResponse(RootModel[list[list[SparseEntry]]]):
    """text-embeddings-inference's /embed_sparse: the non-zero weights of each input."""


NUMPY = orjson.OPT_SERIALIZE_NUMPY


def sparse_body(ctx: ServeContext[Any], outputs: list[Any]) -> bytes:
    """`/embed_sparse`: per input, its non-zero `{index, value}` weights."""
    return orjson.dumps(outputs)


def vectors_body(ctx: ServeContext[Any], vectors: np.ndarray) -> bytes:
    """`/embed`: one vector per input; `/embed_all`: one matrix (a vector per token) each."""
    return orjson.dumps(vectors, option=NUMPY)


def token_vectors_body(ctx: ServeContext[Any], outputs: list[np.ndarray]) -> bytes:
    return orjson.dumps([output.astype(np.float32) for output in outputs], option=NUMPY)


def predictions_body(
    ctx: ServeContext[Any],
    scores: np.ndarray,
    *,
    labels: tuple[str, ...],
    top_k: int | None,
    single: bool,
) -> bytes:
    """`/predict`: each input's labels with their scores, best first (the first `top_k`); one
    input sent as a string gets its list alone, as text-embeddings-inference answers."""
    per_input = [
        [
            {"score": float(row[index]), "label": labels[index]}
            for index in np.argsort(-row, kind="stable")[:top_k]
        ]
        for row in np.atleast_2d(scores)
    ]
    return orjson.dumps(per_input[0] if single else per_input)


def similarity_body(ctx: ServeContext[Any], scores: np.ndarray) -> bytes:
    """`/similarity`: the cosine of the source sentence with each sentence."""
    return orjson.dumps([float(score) for score in scores])


def rerank_body(
    ctx: ServeContext[Any], scores: np.ndarray, *, texts: list[str], return_text: bool
) -> bytes:
    """`/rerank` in text-embeddings-inference's shape: `[{index, score, text?}]`, best first."""
    results: list[dict[str, Any]] = []
    for index, score in ranked(scores, None):
        entry: dict[str, Any] = {"index": index, "score": score}
        if return_text:
            entry["text"] = texts[index]
        results.append(entry)
    return orjson.dumps(results)


def tokens_body(tokenizer: TextTokenizer, texts: list[str], add_special_tokens: bool) -> bytes:
    """`/tokenize` in text-embeddings-inference's shape."""
    return orjson.dumps(token_entries(tokenizer, texts, add_special_tokens))


def token_entries(
    tokenizer: TextTokenizer, texts: list[str], add_special_tokens: bool
) -> list[list[dict[str, Any]]]:
    """Per text, its tokens with their ids, text, whether special, and character offsets
    (None for special tokens), as text-embeddings-inference's tokenize answers."""
    answer = []
    for text, encoding in zip(
        texts, tokenizer.encodings(texts, add_special_tokens=add_special_tokens), strict=True
    ):
        tokens = []
        for token_id, token, special, (start, stop) in zip(
            encoding.ids,
            encoding.tokens,
            encoding.special_tokens_mask,
            encoding.offsets,
            strict=True,
        ):
            tokens.append(
                {
                    "id": token_id,
                    "text": token if special else text[start:stop],
                    "special": bool(special),
                    "start": None if special else start,
                    "stop": None if special else stop,
                }
            )
        answer.append(tokens)
    return answer
