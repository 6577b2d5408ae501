"""text-embeddings-inference's shapes: bare lists, no envelope."""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson

from poolserve.engine.tokenizer import TextTokenizer
from poolserve.tasks.base import ServeContext
from poolserve.tasks.score import ranked

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
    """`/tokenize` in text-embeddings-inference's shape: per text, its tokens with their ids,
    text, whether special, and character offsets (null for special tokens)."""
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
    return orjson.dumps(answer)
