"""BGE-M3's four ways of scoring a query against a document, from one forward pass of each text
(FlagEmbedding's `BGEM3FlagModel.compute_score`):

- `dense`: the cosine of the normalized [CLS] vectors (the default, as for any embedding model);
- `sparse`: the lexical match, the sum over token ids the two texts share of the product of
  their weights (each id's largest `relu(sparse_linear(h))` in its text; special tokens left out);
- `colbert`: over the query's ColBERT vectors (`colbert_linear(h)` of every token after [CLS],
  normalized), the mean of each one's best dot product with a document vector;
- `m3`: (0.4 dense + 0.2 sparse + 0.4 colbert) / 1.0, FlagEmbedding's default weights.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from poolserve.engine.context import ServeContext
from poolserve.inputs.tokenizer import TextTokenizer, TokenizedText
from poolserve.tasks.input_steps import l2_normalize
from poolserve.tasks.score import BiEncoderScorer, ScoreRequest

M3_SCORERS = ("dense", "sparse", "colbert", "m3")
M3_WEIGHTS = {"dense": 0.4, "sparse": 0.2, "colbert": 0.4}


def lexical_weights(
    ids: Sequence[int], weights: np.ndarray, special: frozenset[int]
) -> dict[int, float]:
    """Each token id's largest positive weight in a text, special tokens left out."""
    out: dict[int, float] = {}
    for token, weight in zip(ids, weights.tolist(), strict=True):
        if weight > 0 and token not in special and weight > out.get(token, 0.0):
            out[token] = float(weight)
    return out


def lexical_match(query: dict[int, float], document: dict[int, float]) -> float:
    return float(
        sum(weight * document[token] for token, weight in query.items() if token in document)
    )


def colbert_match(query: np.ndarray, document: np.ndarray) -> float:
    """The mean over query vectors of the best dot product with a document vector."""
    return float((query @ document.T).max(axis=1).mean())


class M3Scorer(BiEncoderScorer):
    names: tuple[str, ...] = M3_SCORERS

    def __init__(self, *, max_model_len: int, special_ids: frozenset[int]) -> None:
        super().__init__(max_model_len=max_model_len)
        self.special_ids = special_ids

    def preprocess(
        self,
        ctx: ServeContext[ScoreRequest],
        tokenizer: TextTokenizer,
        start: int,
        inputs: Sequence[Any],
    ) -> list[TokenizedText]:
        if (ctx.request.scorer or "dense") == "dense":
            return self.tokenize(ctx, tokenizer, start, inputs, "embed")
        tokenized = self.tokenize(ctx, tokenizer, start, inputs, "m3")
        for offset, text in enumerate(tokenized):
            ctx.item_data[start + offset] = text.input_ids  # for the lexical weights
        return tokenized

    def scores(self, ctx: ServeContext[ScoreRequest], outputs: list[np.ndarray]) -> np.ndarray:
        scorer = ctx.request.scorer or "dense"
        if scorer == "dense":
            return super().scores(ctx, outputs)
        request, offset = ctx.request, len(ctx.request.queries)
        dense = l2_normalize(np.stack([output[0, :-1] for output in outputs]).astype(np.float64))
        vectors = [l2_normalize(output[1:, :-1].astype(np.float64)) for output in outputs]
        lexical = [
            lexical_weights(ctx.item_data[index], output[:, -1], self.special_ids)
            for index, output in enumerate(outputs)
        ]

        def score(query: int, document: int) -> dict[str, float]:
            return {
                "dense": float(dense[query] @ dense[document]),
                "sparse": lexical_match(lexical[query], lexical[document]),
                "colbert": colbert_match(vectors[query], vectors[document]),
            }

        results = []
        for query, document in request.pairs:
            each = score(query, offset + document)
            if scorer == "m3":
                total = sum(M3_WEIGHTS.values())
                results.append(sum(M3_WEIGHTS[name] * each[name] for name in each) / total)
            else:
                results.append(each[scorer])
        return np.array(results, dtype=np.float64)
