"""The real server over a socket: routes, headers, and the CLI's start-up failures."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.e2e.conftest import free_port, server_env
from tests.e2e.faults import ENV as FAULTS_ENV
from tests.e2e.harness import Server
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
        [
            *(sys.executable, "-m", "poolserve", "serve", "nonexistent-org/nonexistent-model"),
            *("--port", str(free_port())),
        ],
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


def test_a_port_in_use_fails_at_once_in_one_line() -> None:
    """The port is taken before the model loads: the error comes without loading anything."""
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "poolserve", "serve", "--port", str(port)],
            env=server_env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    output = (result.stdout + result.stderr).strip()
    assert result.returncode == 1, output
    assert len(output.splitlines()) == 1, output
    assert f"cannot listen on 127.0.0.1:{port}" in output and "in use" in output, output


def test_while_the_model_loads_clients_are_refused_and_ctrl_c_exits_with_one_line(
    tmp_path: Path,
) -> None:
    """During a (slowed) load the port is taken but does not listen: a client is refused at
    once, never left waiting. SIGINT then: one line, exit 130, no traceback, no hang."""
    log = tmp_path / "server.log"
    env = {**server_env(), FAULTS_ENV: json.dumps({"load_delay": 600})}
    port = free_port()
    command = [sys.executable, "-m", "tests.e2e.faults", "serve", "--port", str(port)]
    with log.open("wb") as output:
        process = subprocess.Popen(
            [*command, "--runners", "1", "--compile", "off"],
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            cwd=Path(__file__).resolve().parents[2],
        )
    try:
        Server(process, "", log).wait_for_output("loading", timeout=60)
        # Refused, not accepted into a backlog (where the request would wait out the load).
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=5)
        process.send_signal(signal.SIGINT)
        code = process.wait(30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    text = log.read_text()
    assert code == 130, text
    assert "interrupted while loading the model" in text, text
    assert "Traceback" not in text, text
