"""vLLM's pooling API shapes (`/classify`, `/score`, `/pooling`) and the rerank shape vLLM,
Jina and Cohere share (`/rerank`, `/v1/rerank`, `/v2/rerank`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson

from poolserve.models.kinds import Head
from poolserve.server.wire.openai import EncodingFormat, base64_float32, list_body, usage
from poolserve.tasks.base import ServeContext
from poolserve.tasks.score import ranked


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


def rerank_body(
    ctx: ServeContext[Any],
    scores: np.ndarray,
    *,
    documents: list[str],
    top_n: int | None,
    return_documents: bool,
) -> bytes:
    results: list[dict[str, Any]] = []
    for index, score in ranked(scores, top_n):
        entry: dict[str, Any] = {"index": index, "relevance_score": score}
        if return_documents:
            entry["document"] = {"text": documents[index]}
        results.append(entry)
    return orjson.dumps(
        {
            "id": f"rerank-{ctx.request_id}",
            "model": ctx.model_name,
            "results": results,
            "usage": usage(ctx),
        }
    )


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
