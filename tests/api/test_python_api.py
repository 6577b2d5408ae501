"""The Python API, complete: every method gives what the HTTP API gives for the same inputs (the
same task processors, the same engine), the async twins share one event loop without blocking
it, and `embed_iter` streams an iterable of any length."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from poolserve import Engine
from poolserve.errors import InvalidRequestError
from poolserve.offline.model_engine import BATCHES_IN_FLIGHT
from tests.api.helpers import load_engine, post_ok, serving
from tests.reference import WORDS

pytestmark = pytest.mark.anyio

TEXTS = ["How do I bake bread?", "Knead the dough, let it rise.", "Stocks fell on Monday."]
# The same engine batches the two calls differently (split across runners or not), which moves
# the last bits of a float32.
CLOSE = {"rtol": 0, "atol": 2e-6}


def corpus(count: int) -> list[str]:
    return [
        " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(3 + i % 9)) for i in range(count)
    ]


@pytest.fixture(scope="module")
def engines(
    classifier_dir: Path, splade_dir: Path, token_classifier_dir: Path
) -> Iterator[dict[str, Engine]]:
    with (
        load_engine(classifier_dir) as classifier,
        load_engine(splade_dir) as splade,
        load_engine(token_classifier_dir) as token,
    ):
        yield {"classifier": classifier, "splade": splade, "token": token}


async def test_embedding_model_methods_equal_the_http_api(engine: Any) -> None:
    async with serving(engine) as client:
        body = await post_ok(client, "/v1/embeddings", {"input": TEXTS, "dimensions": 64})
        http = np.array([item["embedding"] for item in body["data"]])
        np.testing.assert_allclose(engine.embed(TEXTS, dimensions=64), http, **CLOSE)

        body = await post_ok(client, "/score", {"queries": TEXTS[0], "documents": TEXTS[1:]})
        http_scores = [item["score"] for item in body["data"]]
        np.testing.assert_allclose(engine.score(TEXTS[0], TEXTS[1:]), http_scores, **CLOSE)

        body = await post_ok(client, "/rerank", {"query": TEXTS[0], "documents": TEXTS[1:]})
        ranked = engine.rerank(TEXTS[0], TEXTS[1:])
        assert [index for index, _ in ranked] == [r["index"] for r in body["results"]]

        body = await post_ok(client, "/tokenize", {"prompt": TEXTS[1]})
        assert engine.tokenize(TEXTS[1]) == body["tokens"]
        assert engine.tokenize(TEXTS[:2])[1] == body["tokens"]
        plain = await post_ok(client, "/tokenize", {"prompt": "x", "add_special_tokens": False})
        assert engine.tokenize("x", add_special_tokens=False) == plain["tokens"]

        body = await post_ok(client, "/pooling", {"input": TEXTS[:2], "task": "token_embed"})
        for ours, theirs in zip(
            engine.pool(TEXTS[:2], task="token_embed"), body["data"], strict=True
        ):
            np.testing.assert_allclose(ours, theirs["data"], **CLOSE)


async def test_other_kinds_equal_the_http_api(engines: dict[str, Engine]) -> None:
    async with serving(engines["classifier"]) as client:
        body = await post_ok(client, "/classify", {"input": TEXTS})
        http = np.array([item["probs"] for item in body["data"]])
        np.testing.assert_allclose(engines["classifier"].classify(TEXTS), http, **CLOSE)
    async with serving(engines["splade"]) as client:
        body = await post_ok(client, "/embed_sparse", {"inputs": TEXTS})
        ours = engines["splade"].embed_sparse(TEXTS)
        for weights, entries in zip(ours, body, strict=True):
            theirs = {e["index"]: e["value"] for e in entries}
            assert list(theirs) == sorted(theirs)  # TEI's order: by token id
            terms = sorted(set(weights) | set(theirs))
            np.testing.assert_allclose(
                [weights.get(t, 0.0) for t in terms], [theirs.get(t, 0.0) for t in terms], **CLOSE
            )
        # The same vectors, up to float noise between two calls' batches (docs/performance.md,
        # "Results across batches"): compared over every term either has.
        for pooled, weights in zip(engines["splade"].pool(TEXTS, task="sparse"), ours, strict=True):
            terms = sorted(set(pooled) | set(weights))
            np.testing.assert_allclose(
                [pooled.get(t, 0.0) for t in terms], [weights.get(t, 0.0) for t in terms], **CLOSE
            )
    async with serving(engines["token"]) as client:
        body = await post_ok(client, "/pooling", {"input": TEXTS, "task": "token_classify"})
        for ours, theirs in zip(engines["token"].pool(TEXTS), body["data"], strict=True):
            np.testing.assert_allclose(ours, theirs["data"], **CLOSE)


def test_a_method_the_model_cannot_serve_names_the_ones_it_can(
    engine: Any, engines: dict[str, Engine]
) -> None:
    with pytest.raises(InvalidRequestError, match=r"cannot embed_sparse .*embed, embed_iter"):
        engine.embed_sparse("x")
    with pytest.raises(InvalidRequestError, match=r"cannot embed .*embed_sparse, pool, tokenize"):
        engines["splade"].embed("x")
    with pytest.raises(InvalidRequestError, match="task must be one of its heads: embed, token_"):
        engine.pool("x", task="classify")


async def test_the_async_twins_share_a_running_loop_without_blocking_it(engine: Any) -> None:
    many = corpus(1500)
    big = asyncio.ensure_future(engine.aembed(many))
    # The loop runs another task while the large request is in the engine's hands.
    other_ran = asyncio.Event()
    asyncio.get_running_loop().call_soon(other_ran.set)
    await other_ran.wait()
    assert not big.done(), "aembed held the event loop until it finished"
    results = await asyncio.gather(
        big,
        engine.aembed(TEXTS, normalize=False),
        engine.ascore(TEXTS[0], TEXTS[1:]),
        engine.arerank(TEXTS[0], TEXTS[1:], top_n=1),
        engine.atokenize(TEXTS),
        engine.apool(TEXTS, task="token_embed"),
    )
    np.testing.assert_allclose(results[0], engine.embed(many), **CLOSE)
    np.testing.assert_allclose(results[1], engine.embed(TEXTS, normalize=False), **CLOSE)
    np.testing.assert_allclose(results[2], engine.score(TEXTS[0], TEXTS[1:]), **CLOSE)
    assert results[3][0][0] == engine.rerank(TEXTS[0], TEXTS[1:])[0][0]
    assert results[4] == engine.tokenize(TEXTS)
    assert len(results[5]) == len(TEXTS)


def test_each_method_queued_as_a_future_gives_its_blocking_result(
    engine: Any, engines: dict[str, Engine]
) -> None:
    """The `_later` variants are built from the same builders as the blocking methods."""
    futures = {
        "score": engine.score_later(TEXTS[0], TEXTS[1:]),
        "rerank": engine.rerank_later(TEXTS[0], TEXTS[1:], top_n=2),
        "pool": engine.pool_later(TEXTS[:2], task="token_embed"),
        "classify": engines["classifier"].classify_later(TEXTS),
        "sparse": engines["splade"].embed_sparse_later(TEXTS[:1]),
    }
    np.testing.assert_allclose(
        futures["score"].result(), engine.score(TEXTS[0], TEXTS[1:]), **CLOSE
    )
    ranked = futures["rerank"].result()
    assert len(ranked) == 2
    assert [i for i, _ in ranked] == [i for i, _ in engine.rerank(TEXTS[0], TEXTS[1:])[:2]]
    for ours, blocking in zip(
        futures["pool"].result(), engine.pool(TEXTS[:2], task="token_embed"), strict=True
    ):
        np.testing.assert_allclose(ours, blocking, **CLOSE)
    np.testing.assert_allclose(
        futures["classify"].result(), engines["classifier"].classify(TEXTS), **CLOSE
    )
    (queued,), (blocked,) = futures["sparse"].result(), engines["splade"].embed_sparse(TEXTS[0])
    terms = sorted(set(queued) | set(blocked))
    np.testing.assert_allclose(
        [queued.get(t, 0.0) for t in terms], [blocked.get(t, 0.0) for t in terms], **CLOSE
    )
    # A rerank that cannot be served fails in its future's caller, as in the blocking call.
    with pytest.raises(InvalidRequestError, match="top_n must be 0 or more"):
        engine.rerank_later(TEXTS[0], TEXTS[1:], top_n=-1)


async def test_a_failing_async_call_raises_in_its_caller_only(engine: Any) -> None:
    good, bad = await asyncio.gather(
        engine.aembed(TEXTS), engine.aembed(["fine", " "]), return_exceptions=True
    )
    assert isinstance(bad, InvalidRequestError) and "input 1 is only whitespace" in str(bad)
    assert good.shape == (3, 384)


def test_embed_iter_streams_an_iterable_lazily_and_equals_embed(engine: Any) -> None:
    texts = corpus(1000)
    consumed = 0

    def reading() -> Iterator[str]:
        nonlocal consumed
        for text in texts:
            consumed += 1
            yield text

    stream = engine.embed_iter(reading(), batch_size=64)
    first = next(stream)
    assert first.shape == (64, 384)
    # Only the batches in flight were read, not the whole iterable.
    assert consumed <= 64 * (BATCHES_IN_FLIGHT + 1)
    rest = list(stream)
    assert consumed == len(texts)
    assert [len(batch) for batch in rest][-1] == 1000 % 64
    np.testing.assert_allclose(np.concatenate([first, *rest]), engine.embed(texts), **CLOSE)


def test_embed_iter_stopped_early_cancels_what_is_in_flight(engine: Any) -> None:
    stream = engine.embed_iter(itertools.cycle(TEXTS), batch_size=32)
    assert next(stream).shape == (32, 384)
    stream.close()  # an endless iterable: only closing ends it
    # What was cancelled leaves the engine: its queued inputs are skipped, and the batches that
    # were running end (the shared engine is quiet again for the next test's counters).
    assert engine.core.wait_for_idle_runners(engine.core.runners, 60)
    assert engine.embed("still serving").shape == (1, 384)
    with pytest.raises(InvalidRequestError, match="batch_size must be at least 1"):
        next(engine.embed_iter(TEXTS, batch_size=0))
