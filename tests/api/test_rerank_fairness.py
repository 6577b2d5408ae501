"""A large rerank does not hold up small requests that arrive while it runs.

The rerank of 1,000 documents runs in batches of at most 32 (an engine of its own: with the
default 256, the rerank is four batches, and whether the small requests land beside its last
documents, in the one batch that finishes both, is a race); ten one-sentence embedding requests
sent once its first batch has run must be answered while the rerank still has documents waiting,
not queued behind all of them.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from poolserve import EngineConfig, ModelConfig
from poolserve.offline.model_engine import Engine
from tests.api.helpers import post_ok, serving
from tests.reference import WORDS
from tests.wrapped_backend import WrappedBackend, wrapping

pytestmark = pytest.mark.anyio

N_DOCUMENTS = 1000
N_SMALL = 10
BATCH = 32


class SignallingBackend(WrappedBackend):
    """The torch backend, whose forwards set `ran` once a batch has run (the backend seam)."""

    def __init__(self, inner: Any, ran: threading.Event) -> None:
        super().__init__(inner)
        self.ran = ran

    def executor(self) -> Callable[[Any, int], Sequence[Any]]:
        forward = self.inner.executor()

        def signalling(batch: Any, threads: int) -> Sequence[Any]:
            outputs = forward(batch, threads)
            self.ran.set()
            return outputs

        return signalling


@pytest.fixture(scope="module")
def batch_ran() -> threading.Event:
    """Set by the engine's forwards once a batch has run."""
    return threading.Event()


@pytest.fixture(scope="module")
def small_batches(model_path: Path, batch_ran: threading.Event) -> Iterator[Engine]:
    config = ModelConfig(model=str(model_path), dtype="float32")
    with Engine(
        model_config=config,
        engine_config=EngineConfig(max_batch_size=BATCH),
        backend=wrapping(SignallingBackend, batch_ran),
    ) as engine:
        yield engine


@pytest.fixture
async def client(small_batches: Engine) -> AsyncIterator[httpx.AsyncClient]:
    async with serving(small_batches) as http:
        yield http


async def test_small_requests_finish_before_a_large_rerank(
    client: httpx.AsyncClient, small_batches: Engine, batch_ran: threading.Event
) -> None:
    stats = small_batches.core.stats  # the engine behind `client`: read directly
    rng = random.Random(11)
    documents = [
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 12))) for _ in range(N_DOCUMENTS)
    ]
    total = 1 + N_DOCUMENTS + N_SMALL  # the query, the documents, one sentence per small request
    finished: dict[str, float] = {}
    items_when_finished: dict[str, int] = {}

    async def timed(name: str, path: str, body: dict[str, Any]) -> Any:
        result = await post_ok(client, path, body)
        finished[name] = time.perf_counter()
        items_when_finished[name] = stats.items - before
        return result

    before = stats.items
    batch_ran.clear()  # the warm-up batches ran before
    large = asyncio.create_task(
        timed("rerank", "/rerank", {"query": "a walk by the river", "documents": documents})
    )
    # Wait until the engine has run part of the rerank: the small requests arrive mid-way.
    assert await asyncio.to_thread(batch_ran.wait, 60), "the rerank made no progress"
    assert not large.done(), "the rerank finished before the small requests were sent"
    sent = time.perf_counter()
    small = await asyncio.gather(
        *(
            timed(f"small-{i}", "/v1/embeddings", {"input": f"sentence number {i}"})
            for i in range(N_SMALL)
        )
    )
    body = await large

    assert len(small) == N_SMALL
    assert len(body["results"]) == N_DOCUMENTS
    assert stats.items - before == total
    last_small = max(t for name, t in finished.items() if name != "rerank")
    timeline = (
        f"small requests answered {last_small - sent:.3f}s after they were sent (model items "
        f"run by then: {max(n for k, n in items_when_finished.items() if k != 'rerank')} of "
        f"{total}), the rerank {finished['rerank'] - sent:.3f}s after"
    )
    assert last_small < finished["rerank"], timeline
    # Answered while rerank documents were still waiting, not in the rerank's last batch.
    for name, items in items_when_finished.items():
        if name != "rerank":
            assert items < 1 + N_DOCUMENTS, timeline
