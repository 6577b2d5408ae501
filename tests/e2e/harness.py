"""Real server processes for the hardening tests: start with flags (and injected faults), wait
until ready, read /stats and /metrics, stop with SIGTERM and report how the process ended."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tests.e2e.conftest import free_port, server_env, wait_until_ready
from tests.e2e.faults import ENV as FAULTS_ENV

REPO = Path(__file__).resolve().parents[2]
STOP_SECONDS = 30


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    url: str
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stats(self) -> dict[str, Any]:
        response = httpx.get(f"{self.url}/stats", timeout=10)
        assert response.status_code == 200, response.text
        stats: dict[str, Any] = response.json()
        return stats

    def metrics(self, headers: dict[str, str] | None = None) -> str:
        response = httpx.get(f"{self.url}/metrics", headers=headers, timeout=10)
        assert response.status_code == 200, response.text
        return response.text

    def wait_idle(self, settle: float = 0.0, timeout: float = 10) -> dict[str, Any]:
        """Poll /stats until nothing is queued, then wait `settle` (a batch still running)."""
        deadline = time.monotonic() + timeout
        while (stats := self.stats())["queued_items"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert stats["queued_items"] == 0, stats
        time.sleep(settle)
        return self.stats()

    def stop(self, timeout: float = STOP_SECONDS) -> int:
        """SIGTERM, wait, and return the exit code (killing it and failing if it hangs)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
            pytest.fail(f"the server did not stop on SIGTERM:\n{self.output()}")


@contextmanager
def running_server(
    directory: Path,
    flags: Sequence[str] = (),
    *,
    faults: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
) -> Iterator[Server]:
    """`poolserve serve --dtype float32 --runners 1 --compile off FLAGS` on a free port (through
    the fault launcher when `faults` is given); stopped with SIGTERM when the block ends."""
    port = free_port()
    log = directory / f"server-{port}.log"
    module = "tests.e2e.faults" if faults is not None else "poolserve"
    # One runner unless the test asks for more: the fault tests block "the" runner for a known
    # time (a later --runners in `flags` wins). Eager: with one runner `--compile auto` would
    # compile, which adds most of a minute per server.
    command = [
        *(sys.executable, "-m", module, "serve", "--port", str(port)),
        *("--dtype", "float32", "--runners", "1", "--compile", "off"),
    ]
    environment = {**server_env(), "PYTHONUNBUFFERED": "1", **(env or {})}
    if faults is not None:
        environment[FAULTS_ENV] = json.dumps(faults)
    with log.open("wb") as output:
        process = subprocess.Popen(
            [*command, *flags],
            cwd=REPO,
            env=environment,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    server = Server(process, f"http://127.0.0.1:{port}", log)
    try:
        wait_until_ready(process, server.url, log)
        yield server
    finally:
        server.stop()


# -- Prometheus text ----------------------------------------------------------------------------

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$")


def parse_metrics(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Samples by (name, labels)."""
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        assert match, f"not a Prometheus sample line: {line!r}"
        name, labels, value = match.groups()
        pairs = re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', labels or "")
        samples[(name, frozenset(pairs))] = float(value)
    return samples


def sample(
    metrics: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float:
    """One sample's value; 0 for a labelled counter series that has not been created yet."""
    return metrics.get((name, frozenset(labels.items())), 0.0)


# -- responses ----------------------------------------------------------------------------------


def assert_openai_error(response: httpx.Response, status: int) -> dict[str, Any]:
    """The response is `status` with the OpenAI error shape and no internals; the error object."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json"), response.headers
    assert "Traceback" not in response.text
    assert 'File "' not in response.text
    body = response.json()
    assert set(body) == {"error"}, body
    error: dict[str, Any] = body["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str)
    assert error["message"]
    assert error["code"] == status
    return error


def embedding_vectors(response: httpx.Response) -> np.ndarray:
    """The float vectors of a 200 /v1/embeddings response, in input order."""
    assert response.status_code == 200, response.text
    data = response.json()["data"]
    assert [item["index"] for item in data] == list(range(len(data)))
    return np.array([item["embedding"] for item in data], dtype=np.float32)


def base64_vectors(response: httpx.Response) -> np.ndarray:
    """The vectors of a 200 /v1/embeddings response with `encoding_format: base64`."""
    import base64

    assert response.status_code == 200, response.text
    data = response.json()["data"]
    assert [item["index"] for item in data] == list(range(len(data)))
    rows = [np.frombuffer(base64.b64decode(item["embedding"]), dtype="<f4") for item in data]
    return np.stack(rows).astype(np.float32)
