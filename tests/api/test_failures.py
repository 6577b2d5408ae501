"""Failures stay local: a failing batch is a 500 for its request only, and /health tells the truth.

The engine core here is the real one on the real model, with its backend's forward wrapped (the
engine's backend seam) so that inputs holding a POISON token id fail.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from asgi_lifespan import LifespanManager

from poolserve import EngineConfig, ServerConfig
from poolserve.app import create_app
from poolserve.engine.collate import text_item
from poolserve.engine.engine_core import EngineCore
from poolserve.errors import EngineUnavailableError
from poolserve.offline.model_engine import Engine
from tests.api.helpers import assert_openai_error, embed, vectors
from tests.reference import assert_close_vectors, st_encode
from tests.wrapped_backend import WrappedBackend, wrapping

pytestmark = pytest.mark.anyio

POISON = 29999  # a real vocabulary id that no test text produces
WAIT = 10


class Fatal(BaseException):
    """Escapes the runner's per-batch `except Exception`, so the runner thread dies."""


class PoisonBackend(WrappedBackend):
    """The real torch backend, whose runners' forwards raise `error()` on batches holding
    POISON (injected through the engine's backend seam)."""

    def __init__(self, inner: Any, error: Callable[[], BaseException]) -> None:
        super().__init__(inner)
        self.error = error

    def executor(self) -> Callable[[Any, int], Any]:
        forward = self.inner.executor()

        def guarded(batch: Any, threads: int) -> Any:
            if any(POISON in item.payload.input_ids for item in batch.items):
                raise self.error()
            return forward(batch, threads)

        return guarded


@pytest.fixture
def make_engine(engine: Any) -> Iterator[Callable[..., Any]]:
    """A copy of the session engine with its own core (same model spec, own threads) whose
    backend is poisoned."""
    cores: list[EngineCore] = []

    def make(error: Callable[[], BaseException], runners: int = 1) -> Any:
        core = EngineCore(
            engine.core.model,
            EngineConfig(cpu_workers=1, runners=runners),
            backend=wrapping(PoisonBackend, error),
        )
        core.start()
        cores.append(core)
        service = dataclasses.replace(engine.service, core=core)
        return Engine.over(service, engine.model_config, engine.engine_config)

    yield make
    for core in cores:
        core.close(timeout=WAIT)


@asynccontextmanager
async def client_for(engine: Any) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(engine.service, ServerConfig())
    async with (
        LifespanManager(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client,
    ):
        yield client


@pytest.mark.parametrize("runners", [1, 2])
async def test_failed_batch_is_a_500_for_its_request_and_serving_goes_on(
    make_engine: Callable[..., Any], st_model: Any, runners: int
) -> None:
    poisoned = make_engine(lambda: RuntimeError("poisoned batch"), runners)
    async with client_for(poisoned) as client:
        response = await client.post("/v1/embeddings", json={"input": [101, POISON, 102]})
        error = assert_openai_error(response, 500)
        assert "inference failed" in error["message"]

        assert (await client.get("/health")).status_code == 200
        texts = ["still serving", "after a failed batch"]
        assert_close_vectors(vectors(await embed(client, input=texts)), st_encode(st_model, texts))
        stats = (await client.get("/stats")).json()
        assert stats["failed_batches"] == 1


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
async def test_dead_runner_turns_health_red_and_refuses_work(
    make_engine: Callable[..., Any],
) -> None:
    entered, release = threading.Event(), threading.Event()

    def fatal() -> BaseException:
        entered.set()
        release.wait(WAIT)
        return Fatal("the runner thread is going down")

    poisoned = make_engine(fatal)
    core = poisoned.core
    in_flight = core.open_group(1)
    core.submit([text_item(in_flight, 0, [101, POISON, 102])])
    assert entered.wait(WAIT)
    waiting = core.open_group(1)
    core.submit([text_item(waiting, 0, [101, 2000, 102])])
    release.set()
    # The runner fails every waiting request as it dies.
    assert isinstance(waiting.future.exception(WAIT), EngineUnavailableError)

    async with client_for(poisoned) as client:
        health = await client.get("/health")
        assert health.status_code == 503
        response = await client.post("/v1/embeddings", json={"input": "anyone there?"})
        error = assert_openai_error(response, 503)
        assert "not running" in error["message"]
