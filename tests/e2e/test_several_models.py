"""Several models behind one server: the bundled embedding model and a generated cross-encoder,
served from one process by `--config`, against each model served alone (in process)."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from poolserve import EngineConfig, ModelConfig
from poolserve.offline.model_engine import Engine
from tests.e2e.harness import (
    TEXTS,
    Server,
    parse_metrics,
    running_server,
    sample,
    wait_for_stats,
)

pytestmark = pytest.mark.slow

EMBEDDER, RERANKER = "minilm", "reranker"
QUERY = "Which animal jumps over the dog?"


@pytest.fixture(scope="module")
def two_models(
    tmp_path_factory: pytest.TempPathFactory, model_path: Path, cross_encoder_dir: Path
) -> Iterator[Server]:
    directory = tmp_path_factory.mktemp("several")
    config = directory / "models.toml"
    config.write_text(
        f'[[models]]\nmodel = "{model_path}"\nserved_model_name = ["{EMBEDDER}", "embedder"]\n\n'
        f'[[models]]\nmodel = "{cross_encoder_dir}"\nserved_model_name = "{RERANKER}"\n'
        "runners = 1\n"
    )
    with running_server(directory, ["--config", str(config), "--runners", "2"]) as server:
        yield server


@pytest.fixture(scope="module")
def reranker_alone(cross_encoder_dir: Path) -> Iterator[Engine]:
    with Engine(
        model_config=ModelConfig(model=str(cross_encoder_dir), dtype="float32"),
        engine_config=EngineConfig(runners=1),
    ) as engine:
        yield engine


def test_models_lists_every_model_with_its_kind_and_routes(two_models: Server) -> None:
    cards = httpx.get(f"{two_models.url}/v1/models").json()["data"]
    assert [card["id"] for card in cards] == [EMBEDDER, "embedder", RERANKER]
    embedder, _, reranker = cards
    assert embedder["kind"] == "embedding" and reranker["kind"] == "cross_encoder"
    assert "/v1/embeddings" in embedder["routes"] and "/rerank" in embedder["routes"]
    assert "/v1/embeddings" not in reranker["routes"] and "/classify" in reranker["routes"]
    assert embedder["max_model_len"] == 256 and embedder["embedding_dim"] == 384
    assert reranker["embedding_dim"] is None


def test_requests_are_routed_by_model_and_equal_each_model_alone(
    two_models: Server, engine: Any, reranker_alone: Engine
) -> None:
    url = two_models.url
    for name in (EMBEDDER, "embedder", None):  # no model: the first that embeds
        body = {"input": TEXTS[:4], **({"model": name} if name else {})}
        response = httpx.post(f"{url}/v1/embeddings", json=body, timeout=30)
        assert response.status_code == 200, response.text
        assert response.json()["model"] == EMBEDDER
        vectors = np.array([item["embedding"] for item in response.json()["data"]])
        np.testing.assert_allclose(vectors, engine.embed(TEXTS[:4]), atol=2e-6)

    documents = TEXTS[:6]
    response = httpx.post(
        f"{url}/rerank",
        json={"model": RERANKER, "query": QUERY, "documents": documents},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    assert response.json()["model"] == RERANKER
    got = {item["index"]: item["relevance_score"] for item in response.json()["results"]}
    expected = reranker_alone.score(QUERY, documents)
    np.testing.assert_allclose([got[i] for i in range(len(documents))], expected, atol=1e-6)

    # /rerank without a model goes to the first model that serves it: the embedder (cosine).
    response = httpx.post(f"{url}/rerank", json={"query": QUERY, "documents": documents})
    assert response.json()["model"] == EMBEDDER
    scores = {item["index"]: item["relevance_score"] for item in response.json()["results"]}
    expected = engine.score(QUERY, documents)
    np.testing.assert_allclose([scores[i] for i in range(len(documents))], expected, atol=2e-6)

    classify = httpx.post(f"{url}/classify", json={"input": documents[:2]}).json()
    assert classify["model"] == RERANKER  # the only model that classifies


def test_unknown_names_and_wrong_routes_say_what_is_served(two_models: Server) -> None:
    response = httpx.post(f"{two_models.url}/v1/embeddings", json={"model": "gpt-4", "input": "a"})
    assert response.status_code == 404
    message = response.json()["error"]["message"]
    for name in (EMBEDDER, "embedder", RERANKER):
        assert repr(name) in message, message

    response = httpx.post(f"{two_models.url}/v1/embeddings", json={"model": RERANKER, "input": "a"})
    assert response.status_code == 400
    message = response.json()["error"]["message"]
    assert "cross_encoder" in message and repr(EMBEDDER) in message, message


def test_metrics_and_stats_are_labelled_by_model(two_models: Server) -> None:
    url = two_models.url
    before = parse_metrics(two_models.metrics())
    httpx.post(f"{url}/v1/embeddings", json={"model": EMBEDDER, "input": ["a", "b"]})
    httpx.post(f"{url}/rerank", json={"model": RERANKER, "query": "q", "documents": ["d"]})
    after = parse_metrics(two_models.metrics())

    def delta(name: str, **labels: str) -> float:
        return sample(after, name, **labels) - sample(before, name, **labels)

    assert delta("poolserve_requests_total", route="/v1/embeddings", model=EMBEDDER) == 1
    assert delta("poolserve_requests_total", route="/rerank", model=RERANKER) == 1
    assert delta("poolserve_runner_items_total", model=EMBEDDER) == 2
    assert delta("poolserve_runner_items_total", model=RERANKER) == 1
    assert delta("poolserve_stage_seconds_count", stage="inference", model=RERANKER) == 1
    stats = two_models.stats()
    assert set(stats["models"]) == {EMBEDDER, RERANKER}
    assert stats["models"][RERANKER]["items"] >= 1


def _engine_ms(response: httpx.Response) -> float:
    """The engine's own time for a request: waiting for a runner, then in the model (the
    x-queue-time and x-inference-time it measured, in ms)."""
    assert response.status_code == 200, response.text
    headers = response.headers
    return float(headers["x-queue-time"]) + float(headers["x-inference-time"])


def test_a_flood_on_one_model_does_not_starve_the_other(two_models: Server) -> None:
    """The reranker's median engine time (queue + inference, as its engine measured them)
    under a flood of the embedder stays within 3x of its median alone. Alone and flooded
    rounds alternate, so a drift of the machine's speed weighs on both.

    Why 3x: on two cores the flood keeps two embedder threads busy beside the reranker's two,
    so sharing the cores alone costs the reranker up to 2x (CI measured 2.02x once). Starving
    it, i.e. queueing it behind one 64-sentence flood batch, would cost 10x or more."""
    url = two_models.url
    rerank = {"model": RERANKER, "query": QUERY, "documents": TEXTS[:8]}
    # The flood's client does little work (base64 bodies, not decoded): the cores go to the
    # server.
    flood_body = {"model": EMBEDDER, "input": TEXTS * 4, "encoding_format": "base64"}
    alone: list[float] = []
    flooded: list[float] = []
    embedder_busy = windows = 0.0

    def reranks(client: httpx.Client, into: list[float], count: int) -> None:
        into.extend(_engine_ms(client.post(f"{url}/rerank", json=rerank)) for _ in range(count))

    def flood(stop: threading.Event, started: threading.Barrier) -> None:
        with httpx.Client(timeout=60) as flooder:
            started.wait()
            while not stop.is_set():
                assert flooder.post(f"{url}/v1/embeddings", json=flood_body).status_code == 200

    with httpx.Client(timeout=60) as client, ThreadPoolExecutor(FLOODERS) as pool:
        reranks(client, [], 5)  # warm
        for _ in range(ROUNDS):
            reranks(client, alone, SAMPLES)
            stop, started = threading.Event(), threading.Barrier(FLOODERS + 1)
            floods = [pool.submit(flood, stop, started) for _ in range(FLOODERS)]
            started.wait()
            try:
                before = wait_for_stats(
                    two_models, lambda s: s["models"][EMBEDDER]["queued_items"] > 0
                )
                window_started = time.perf_counter()
                reranks(client, flooded, SAMPLES)
                after = two_models.stats()
                windows += time.perf_counter() - window_started
            finally:
                stop.set()
            for each in floods:
                each.result()
            embedder_busy += (
                after["models"][EMBEDDER]["busy_seconds"]
                - before["models"][EMBEDDER]["busy_seconds"]
            )
            two_models.wait_idle()
    # The embedder's runners were computing for at least half of the time the reranker was
    # measured (busy time counts when a batch ends, so a batch straddling a window edge is
    # counted in one window or the next: half, not all).
    assert embedder_busy >= 0.5 * windows, (embedder_busy, windows)
    assert statistics.median(flooded) <= 3 * statistics.median(alone), (
        statistics.median(alone),
        statistics.median(flooded),
    )


FLOODERS, ROUNDS, SAMPLES = 4, 3, 100
