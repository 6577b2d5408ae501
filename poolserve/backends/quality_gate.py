"""The quality gate of a quantized model: its outputs against the unquantized model's, over the
probe of real text shipped with the package (backends/probe.txt), in the terms a user of each
kind would judge them by.

- Vectors (embeddings, SPLADE's sparse vectors, BGE-M3's heads): the cosine of each input's
  vector with the reference's, at least `MEAN_COSINE` on average and `MIN_COSINE` for the worst
  (sentence-transformers' OpenVINO int8 loses about 0.4 % of retrieval accuracy there; the
  fastembed-rs release gate ships quantized models at a minimum of 0.90).
- Token vectors (ColBERT): the same, over every token's vector.
- Scores and labels (cross-encoders, classifiers, token classifiers): the probabilities a client
  sees (a sigmoid of a single logit, else a softmax) within `MAX_SCORE_DIFFERENCE`, and no label
  (the most probable class; for one logit, which side of 0.5) changed.

Numpy only: each backend hands in the per-input outputs of its two models.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from poolserve.models.kinds import Head

MEAN_COSINE = 0.99
MIN_COSINE = 0.98
MAX_SCORE_DIFFERENCE = 0.02

_VECTOR_HEADS = frozenset({"embed", "sparse", "m3", "image_embed"})
_SCORE_HEADS = frozenset({"classify", "token_classify"})


def figures(
    head: Head, reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray]
) -> dict[str, float]:
    """The gate's figures of `candidate`'s outputs against `reference`'s (one array per input:
    a vector, or a row per token for token heads)."""
    if len(reference) != len(candidate):
        raise ValueError(f"{len(candidate)} outputs against {len(reference)} references")
    if head in _SCORE_HEADS:
        return _score_figures(reference, candidate)
    if head in _VECTOR_HEADS:
        cosines = np.array(
            [
                _cosine(a.reshape(1, -1), b.reshape(1, -1))[0]
                for a, b in _pairs(reference, candidate)
            ]
        )
    else:  # token vectors, each token's
        cosines = np.concatenate(
            [
                _cosine(a.reshape(len(a), -1), b.reshape(len(b), -1))
                for a, b in _pairs(reference, candidate)
            ]
        )
    return {"mean_cosine": float(cosines.mean()), "min_cosine": float(cosines.min())}


def failures(measured: dict[str, float]) -> tuple[str, ...]:
    """What in `measured` falls short of the gate (empty: it passes), each as "name value <
    bound"."""
    out = []
    if "mean_cosine" in measured and measured["mean_cosine"] < MEAN_COSINE:
        out.append(f"mean cosine {measured['mean_cosine']:.4f} < {MEAN_COSINE}")
    if "min_cosine" in measured and measured["min_cosine"] < MIN_COSINE:
        out.append(f"min cosine {measured['min_cosine']:.4f} < {MIN_COSINE}")
    difference = measured.get("max_score_difference")
    if difference is not None and difference > MAX_SCORE_DIFFERENCE:
        out.append(f"score difference {difference:.4f} > {MAX_SCORE_DIFFERENCE}")
    if measured.get("labels_changed", 0) > 0:
        out.append(f"{int(measured['labels_changed'])} labels changed")
    return tuple(out)


def worse(first: dict[str, float], second: dict[str, float]) -> dict[str, float]:
    """The worse of two layouts' figures, figure by figure."""
    out = dict(first)
    for name, value in second.items():
        if name not in out:
            out[name] = value
        elif name in ("mean_cosine", "min_cosine"):
            out[name] = min(out[name], value)
        else:
            out[name] = max(out[name], value)
    return out


def quality(measured: dict[str, float]) -> float:
    """One number to rank candidates by (higher is better): the worst cosine, or minus the worst
    score difference (less a whole point per changed label)."""
    if "min_cosine" in measured:
        return measured["min_cosine"]
    return -measured["max_score_difference"] - measured["labels_changed"]


def _pairs(
    reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray]
) -> list[tuple[np.ndarray, np.ndarray]]:
    return [
        (np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
        for a, b in zip(reference, candidate, strict=True)
    ]


def _cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row by row; two all-zero rows (a SPLADE vector of nothing) count as equal."""
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    dots = (a * b).sum(axis=1)
    both_zero = (np.linalg.norm(a, axis=1) == 0) & (np.linalg.norm(b, axis=1) == 0)
    cosines = np.where(norms > 0, dots / np.where(norms > 0, norms, 1.0), 0.0)
    result: np.ndarray = np.where(both_zero, 1.0, cosines)
    return result


def _probabilities(logits: np.ndarray) -> np.ndarray:
    """Per row (an input's, or a token's): a sigmoid of one logit, else a softmax."""
    rows = logits.reshape(-1, logits.shape[-1])
    if rows.shape[-1] == 1:
        sigmoid: np.ndarray = 1.0 / (1.0 + np.exp(-rows))
        return sigmoid
    shifted = np.exp(rows - rows.max(axis=1, keepdims=True))
    softmax: np.ndarray = shifted / shifted.sum(axis=1, keepdims=True)
    return softmax


def _labels(probabilities: np.ndarray) -> np.ndarray:
    labels: np.ndarray = (
        (probabilities[:, 0] > 0.5).astype(np.int64)
        if probabilities.shape[-1] == 1
        else probabilities.argmax(axis=1)
    )
    return labels


def _score_figures(
    reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray]
) -> dict[str, float]:
    difference = 0.0
    changed = 0
    for a, b in _pairs(reference, candidate):
        expected, got = _probabilities(a), _probabilities(b)
        difference = max(difference, float(np.abs(expected - got).max()))
        changed += int((_labels(expected) != _labels(got)).sum())
    return {"max_score_difference": difference, "labels_changed": float(changed)}
