"""text-embeddings-inference's gRPC answers: each task's result as its `tei.v1` message,
serialized in the CPU pool (the encoder of the request template, engine/pipeline.py), with the
`Metadata` TEI's answers carry (characters and tokens computed, each stage's nanoseconds)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from poolserve.engine.context import ServeContext
from poolserve.tasks.score import ranked
from poolserve.tei_grpc.stubs import tei_pb2 as pb


def metadata(ctx: ServeContext[Any], chars: int) -> pb.Metadata:
    timings = ctx.timings
    return pb.Metadata(
        compute_chars=chars,
        compute_tokens=ctx.prompt_tokens,
        total_time_ns=int((time.perf_counter() - timings.received) * 1e9),
        tokenization_time_ns=int(timings.tokenize * 1e9),
        queue_time_ns=int(timings.queue * 1e9),
        inference_time_ns=int(timings.inference * 1e9),
    )


def embed_answer(ctx: ServeContext[Any], vectors: np.ndarray, *, chars: int) -> bytes:
    return pb.EmbedResponse(
        embeddings=vectors[0].tolist(), metadata=metadata(ctx, chars)
    ).SerializeToString()


def embed_all_answer(ctx: ServeContext[Any], outputs: list[np.ndarray], *, chars: int) -> bytes:
    tokens = [pb.TokenEmbedding(embeddings=row) for row in outputs[0].astype(np.float32).tolist()]
    return pb.EmbedAllResponse(
        token_embeddings=tokens, metadata=metadata(ctx, chars)
    ).SerializeToString()


def sparse_answer(ctx: ServeContext[Any], outputs: list[Any], *, chars: int) -> bytes:
    values = [pb.SparseValue(index=entry["index"], value=entry["value"]) for entry in outputs[0]]
    return pb.EmbedSparseResponse(
        sparse_embeddings=values, metadata=metadata(ctx, chars)
    ).SerializeToString()


def predict_answer(
    ctx: ServeContext[Any], scores: np.ndarray, *, labels: tuple[str, ...], chars: int
) -> bytes:
    """One input's labels with their scores, best first."""
    row = np.atleast_2d(scores)[0]
    predictions = [
        pb.Prediction(score=float(row[index]), label=labels[index])
        for index in np.argsort(-row, kind="stable")
    ]
    return pb.PredictResponse(
        predictions=predictions, metadata=metadata(ctx, chars)
    ).SerializeToString()


def rerank_answer(
    ctx: ServeContext[Any],
    scores: np.ndarray,
    *,
    texts: list[str],
    return_text: bool,
    chars: int,
) -> bytes:
    """Each text's index and score, best first (with its text when asked)."""
    ranks = [
        pb.Rank(index=index, score=score, text=texts[index] if return_text else None)
        for index, score in ranked(scores, None)
    ]
    return pb.RerankResponse(ranks=ranks, metadata=metadata(ctx, chars)).SerializeToString()


def tokens_answer(entries: list[dict[str, Any]]) -> bytes:
    """One text's tokens (apis/tei/answers.py's `token_entries`)."""
    return pb.EncodeResponse(
        tokens=[pb.SimpleToken(**entry) for entry in entries]
    ).SerializeToString()
