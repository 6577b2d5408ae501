"""The real server over a socket: routes, headers, and the CLI's start-up failures."""

from __future__ import annotations

import subprocess
import sys

import httpx
import numpy as np
import pytest

from tests.e2e.conftest import server_env
from tests.reference import FP32_COSINE, MAX_LEN, MODEL_ID, Corpus, assert_close_vectors

pytestmark = pytest.mark.slow  # a real server process


def test_health_models_and_version(server_url: str) -> None:
    assert httpx.get(f"{server_url}/health").status_code == 200
    models = httpx.get(f"{server_url}/v1/models").json()["data"]
    assert [(m["id"], m["max_model_len"]) for m in models] == [(MODEL_ID, MAX_LEN)]
    assert httpx.get(f"{server_url}/version").json()["version"]


def test_embeddings_with_headers_over_the_socket(server_url: str, corpus: Corpus) -> None:
    response = httpx.post(
        f"{server_url}/v1/embeddings",
        json={"input": corpus.over, "truncate_prompt_tokens": -1},
        headers={"x-request-id": "e2e-request-1"},
        timeout=120,
    )
    assert response.status_code == 200
    assert response.headers["x-request-id"] == "e2e-request-1"
    for name in ("x-queue-time", "x-inference-time", "x-total-time"):
        assert float(response.headers[name]) >= 0
    actual = np.array([d["embedding"] for d in response.json()["data"]], dtype=np.float32)
    assert_close_vectors(actual, corpus.ref_over, FP32_COSINE, corpus.over)


def test_malformed_json_over_the_socket(server_url: str) -> None:
    response = httpx.post(
        f"{server_url}/v1/embeddings",
        content=b'{"input": ',
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 400
    assert set(response.json()["error"]) == {"message", "type", "param", "code"}


def test_serve_with_hub_id_offline_exits_cleanly() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "poolserve", "serve", "nonexistent-org/nonexistent-model"],
        env=server_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "cannot start" in output
    assert "nonexistent-org/nonexistent-model" in output
    assert "offline" in output
    assert "Traceback" not in output
