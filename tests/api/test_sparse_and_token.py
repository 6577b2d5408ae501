"""SPLADE (/embed_sparse, /pooling "sparse") and token classification (/pooling "token_classify")
against transformers in float64."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from poolserve import Engine
from tests.api.helpers import load_engine, post_ok, serving
from tests.tiny_models import TOKEN_LABELS, splade_reference, token_classifier_reference

pytestmark = pytest.mark.anyio

RTOL = 1e-4
# Weights are log1p(relu(logit)): near zero, fp32 rounding of the logit (~1e-7) dominates, so
# values are compared 1e-4 relative plus this much absolute.
ATOL = 1e-6
THRESHOLD = 1e-4  # terms below this weight are ignored when comparing term sets
TEXTS = [
    "The cat sat on the mat.",
    "hello world",
    "John Smith lives in Paris and works in Berlin.",
    "x",
    "Sparse retrieval expands every document into weighted vocabulary terms.",
]


@pytest.fixture(scope="module")
def splade_engine(splade_dir: Path) -> Iterator[Engine]:
    with load_engine(splade_dir) as engine:
        yield engine


@pytest.fixture(scope="module")
def token_engine(token_classifier_dir: Path) -> Iterator[Engine]:
    with load_engine(token_classifier_dir) as engine:
        yield engine


@pytest.fixture(scope="module")
def splade_expected(splade_dir: Path) -> list[dict[int, float]]:
    return splade_reference(splade_dir, TEXTS)


@pytest.fixture
async def splade_client(splade_engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    async with serving(splade_engine) as http:
        yield http


@pytest.fixture
async def token_client(token_engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    async with serving(token_engine) as http:
        yield http


def assert_sparse_equal(got: list[dict[str, Any]], expected: dict[int, float]) -> None:
    indices = [entry["index"] for entry in got]
    assert indices == sorted(indices), "entries are not sorted by index"
    assert len(set(indices)) == len(indices)
    assert all(set(entry) == {"index", "value"} for entry in got)
    values = {entry["index"]: entry["value"] for entry in got}
    assert all(value > 0 for value in values.values())
    significant = {i for i, v in values.items() if abs(v) >= THRESHOLD}
    assert significant == {i for i, v in expected.items() if abs(v) >= THRESHOLD}
    assert len(significant) > 10  # a real, non-trivial term set
    keys = sorted(set(values) | set(expected))
    np.testing.assert_allclose(
        [values.get(i, 0.0) for i in keys],
        [expected.get(i, 0.0) for i in keys],
        rtol=RTOL,
        atol=ATOL,
    )


async def test_embed_sparse_equals_reference(
    splade_client: httpx.AsyncClient, splade_expected: list[dict[int, float]]
) -> None:
    body = await post_ok(splade_client, "/embed_sparse", {"inputs": TEXTS})
    assert isinstance(body, list)
    assert len(body) == len(TEXTS)
    for got, expected in zip(body, splade_expected, strict=True):
        assert_sparse_equal(got, expected)


async def test_embed_sparse_one_string(
    splade_client: httpx.AsyncClient, splade_expected: list[dict[int, float]]
) -> None:
    body = await post_ok(splade_client, "/embed_sparse", {"inputs": TEXTS[2]})
    (got,) = body
    assert_sparse_equal(got, splade_expected[2])


async def test_pooling_sparse_equals_embed_sparse(
    splade_client: httpx.AsyncClient, splade_expected: list[dict[int, float]]
) -> None:
    sparse = await post_ok(splade_client, "/embed_sparse", {"inputs": TEXTS})
    pooled = await post_ok(splade_client, "/pooling", {"input": TEXTS, "task": "sparse"})
    assert [item["index"] for item in pooled["data"]] == list(range(len(TEXTS)))
    # Equal up to float noise: two calls may run in different batch layouts (docs/performance.md,
    # "Results across batches").
    for item, expected, other in zip(pooled["data"], splade_expected, sparse, strict=True):
        assert_sparse_equal(item["data"], expected)
        assert_sparse_equal(other, expected)
    # "sparse" is the SPLADE model's main head: it is the default task.
    default = await post_ok(splade_client, "/pooling", {"input": TEXTS})
    for item, expected in zip(default["data"], splade_expected, strict=True):
        assert_sparse_equal(item["data"], expected)


async def test_token_classify_probs_and_labels(
    token_client: httpx.AsyncClient, token_classifier_dir: Path
) -> None:
    body = await post_ok(token_client, "/pooling", {"input": TEXTS, "task": "token_classify"})
    expected = token_classifier_reference(token_classifier_dir, TEXTS)
    assert [item["index"] for item in body["data"]] == list(range(len(TEXTS)))
    for item, reference in zip(body["data"], expected, strict=True):
        probs = np.array(item["data"])
        # One row per token, [CLS] and [SEP] included.
        assert probs.shape == (len(reference.input_ids), len(TOKEN_LABELS))
        assert reference.special[0] and reference.special[-1]
        np.testing.assert_allclose(probs, reference.probs, rtol=RTOL, atol=1e-7)
        assert item["labels"] == reference.labels
    assert body["usage"]["prompt_tokens"] == sum(len(r.input_ids) for r in expected)
    all_labels = {label for item in body["data"] for label in item["labels"]}
    assert len(all_labels) > 1


async def test_token_classify_raw_logits(
    token_client: httpx.AsyncClient, token_classifier_dir: Path
) -> None:
    body = await post_ok(
        token_client,
        "/pooling",
        {"input": TEXTS[:2], "task": "token_classify", "use_activation": False},
    )
    expected = token_classifier_reference(token_classifier_dir, TEXTS[:2])
    for item, reference in zip(body["data"], expected, strict=True):
        np.testing.assert_allclose(np.array(item["data"]), reference.logits, rtol=RTOL, atol=1e-5)
        assert item["labels"] == reference.labels
