"""Ray Serve: the app from a Ray Serve config's `args`, as two replicas behind Ray's proxy,
answers as the local engine does, with the same errors and routes."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import numpy as np
import openai
import pytest
from ray import serve

from poolserve.ray import build_app
from poolserve.ray.replica import APP_NAME
from tests.e2e.conftest import free_port
from tests.reference import FP32_COSINE, WORDS, assert_close_vectors

pytestmark = [pytest.mark.slow, pytest.mark.ray]


def sentence(index: int) -> str:
    return " ".join(WORDS[(index * 7 + j) % len(WORDS)] for j in range(3 + index % 17))


@pytest.fixture(scope="module")
def served(ray_address: str) -> Any:
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    app = build_app(
        {
            "replicas": 2,
            "replica-cpus": 1,
            "dtype": "float32",
            "compile": "off",
            "served_model_name": ["minilm", "all-minilm"],
            "max_queued_tokens": 65536,
        }
    )
    serve.run(app, name=APP_NAME, route_prefix="/")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()


def test_two_replicas_run(served: str) -> None:
    deployments = serve.status().applications[APP_NAME].deployments
    assert deployments[APP_NAME].replica_states == {"RUNNING": 2}


def test_concurrent_requests_get_the_local_engines_vectors(served: str, engine: Any) -> None:
    batches = [[sentence(i * 5 + j) for j in range(1 + i % 5)] for i in range(48)]

    def embed(texts: list[str]) -> np.ndarray:
        response = httpx.post(f"{served}/v1/embeddings", json={"input": texts}, timeout=120)
        assert response.status_code == 200, response.text
        assert response.json()["model"] == "minilm"
        assert len(response.headers.get_list("x-request-id")) == 1
        return np.array([item["embedding"] for item in response.json()["data"]])

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(embed, batches))
    for texts, vectors in zip(batches, results, strict=True):
        assert_close_vectors(vectors, engine.embed(texts), FP32_COSINE, texts)


def test_the_openai_client_decodes_base64_through_the_proxy(served: str, engine: Any) -> None:
    client = openai.OpenAI(base_url=f"{served}/v1", api_key="unused")
    texts = [sentence(i) for i in range(5)]
    response = client.embeddings.create(model="all-minilm", input=texts)
    assert_close_vectors([item.embedding for item in response.data], engine.embed(texts))
    assert response.usage.prompt_tokens == sum(len(engine.tokenize(text)) for text in texts)


def test_errors_and_routes_are_the_single_servers(served: str) -> None:
    with httpx.Client(base_url=served, timeout=60) as client:
        typo = client.post("/v1/embeddings", json={"input": "hello", "dimension": 8})
        assert typo.status_code == 400
        assert "did you mean `dimensions`" in typo.json()["error"]["message"]
        unknown = client.post("/v1/embeddings", json={"input": "hi", "model": "nope"})
        assert unknown.status_code == 404
        assert "minilm" in unknown.json()["error"]["message"]
        blank = client.post("/v1/embeddings", json={"input": ["fine", "  "]})
        assert blank.status_code == 400 and "input 1" in blank.json()["error"]["message"]
        assert client.get("/health").status_code == 200
        assert client.get("/v1/models").json()["data"][0]["id"] == "minilm"
        metrics = client.get("/metrics")
        assert metrics.status_code == 200
        assert "poolserve_requests_total" in metrics.text
        tokens = client.post("/tokenize", json={"prompt": "hello world"})
        assert tokens.status_code == 200 and tokens.json()["count"] == 4


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"replicas": 0}, "argument --replicas: '0' is not an integer from 1 up"),
        ({"max_queued_tokens": 1000}, "--max-client-batch-size 2048 inputs cost at least"),
        ({"replica_cpu": 2}, "unknown arg `replica_cpu`; did you mean `replica_cpus`?"),
        ({"port": 9000}, "`port` is Ray Serve's to set"),
    ],
)
def test_build_app_checks_its_args_as_the_command_line_does(
    args: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        build_app(args)


def test_a_replica_freezes_what_it_loaded_once_its_app_is_built() -> None:
    """The p99 fix `poolserve serve` applies (server/gc_freeze.py) applies in each replica."""
    import gc

    from poolserve import EngineConfig, ModelConfig, ServerConfig
    from poolserve.ray.replica import EngineReplica

    replica = EngineReplica(
        ModelConfig(dtype="float32"), EngineConfig(cpu_workers=1), ServerConfig()
    )
    gc.unfreeze()
    try:
        replica.__serve_build_asgi_app__()
        assert gc.get_freeze_count() > 100_000  # torch, transformers, the model
    finally:
        gc.unfreeze()
        replica.engine.close()
