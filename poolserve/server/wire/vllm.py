"""vLLM's `/score` shape and the rerank shape vLLM, Jina and Cohere share (`/rerank`,
`/v1/rerank`, `/v2/rerank`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson

from poolserve.server.wire.openai import list_body, usage
from poolserve.tasks.base import ServeContext
from poolserve.tasks.score import ranked


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
