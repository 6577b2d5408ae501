"""The quality gate's figures, against float64 arithmetic written out here."""

from __future__ import annotations

import numpy as np

from poolserve.backends import quality_gate


def test_vector_figures_are_the_cosines_of_each_input() -> None:
    rng = np.random.default_rng(31)
    reference = [rng.normal(size=8) for _ in range(5)]
    candidate = [vector + rng.normal(scale=0.05, size=8) for vector in reference]
    cosines = [
        float(a @ b / np.sqrt((a @ a) * (b @ b))) for a, b in zip(reference, candidate, strict=True)
    ]
    figures = quality_gate.figures("embed", reference, candidate)
    assert np.isclose(figures["mean_cosine"], np.mean(cosines))
    assert np.isclose(figures["min_cosine"], min(cosines))


def test_token_vectors_are_judged_token_by_token() -> None:
    reference = [np.array([[1.0, 0.0], [0.0, 1.0]])]
    candidate = [np.array([[1.0, 0.0], [1.0, 1.0]])]
    figures = quality_gate.figures("token_embed", reference, candidate)
    assert np.isclose(figures["min_cosine"], np.sqrt(0.5))
    assert np.isclose(figures["mean_cosine"], (1 + np.sqrt(0.5)) / 2)


def test_scores_are_judged_as_probabilities_and_labels() -> None:
    # One logit: a sigmoid; 0.0 -> 0.5 and 0.1 -> 0.525 cross no label but differ by 0.025.
    figures = quality_gate.figures("classify", [np.array([0.1])], [np.array([-0.01])])
    assert np.isclose(
        figures["max_score_difference"], 1 / (1 + np.exp(-0.1)) - 1 / (1 + np.exp(0.01))
    )
    assert figures["labels_changed"] == 1
    three = quality_gate.figures(
        "classify", [np.array([2.0, 1.0, 0.0])], [np.array([2.0, 1.0, 0.0])]
    )
    assert three == {"max_score_difference": 0.0, "labels_changed": 0.0}


def test_failures_name_each_figure_below_its_bound() -> None:
    assert quality_gate.failures({"mean_cosine": 0.995, "min_cosine": 0.985}) == ()
    failed = quality_gate.failures({"mean_cosine": 0.97, "min_cosine": 0.5})
    assert failed == ("mean cosine 0.9700 < 0.99", "min cosine 0.5000 < 0.98")
    assert quality_gate.failures({"max_score_difference": 0.03, "labels_changed": 2.0}) == (
        "score difference 0.0300 > 0.02",
        "2 labels changed",
    )
    worse = quality_gate.worse(
        {"mean_cosine": 0.99, "min_cosine": 0.98}, {"mean_cosine": 0.995, "min_cosine": 0.97}
    )
    assert worse == {"mean_cosine": 0.99, "min_cosine": 0.97}
