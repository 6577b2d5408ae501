"""A real server: `python -m poolserve serve` on a free port, started once for the e2e tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

STARTUP_SECONDS = 300  # generous: a server with --compile compiles at start-up


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def server_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("POOLSERVE_")}
    env["HF_HUB_OFFLINE"] = "1"
    return env


def wait_until_ready(process: subprocess.Popen[bytes], url: str, log: Path) -> None:
    """The one allowed loop: retry /health while the server is still starting."""
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the server exited with {process.returncode}:\n{log.read_text()}")
        try:
            if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    pytest.fail(f"the server was not ready after {STARTUP_SECONDS}s:\n{log.read_text()}")


@pytest.fixture(scope="session")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`poolserve serve` with its defaults (a runner per core, `--compile auto`), in float32 so
    that it can be checked tightly."""
    port = free_port()
    log = tmp_path_factory.mktemp("server") / "server.log"
    command = [sys.executable, "-m", "poolserve", "serve", "--port", str(port)]
    command += ["--dtype", "float32", "--log-level", "info"]
    # The Batch API's folder: the test run's own (the default is the user's cache).
    command += ["--batch-dir", str(log.parent / "batches")]
    with log.open("wb") as output:
        process = subprocess.Popen(
            command, env=server_env(), stdout=output, stderr=subprocess.STDOUT
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_ready(process, url, log)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
            pytest.fail(f"the server did not stop on SIGTERM:\n{log.read_text()}")
    # uvicorn re-raises the SIGTERM it handled once its graceful shutdown is done.
    text = log.read_text()
    assert process.returncode in (0, -signal.SIGTERM), f"exit {process.returncode}:\n{text}"
    assert "Application shutdown complete" in text, text
    assert "Traceback" not in text, text
