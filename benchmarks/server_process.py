"""Starting `poolserve serve` as a child process on a free loopback port, for benchmarks."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def running_server(args: Sequence[str], *, timeout: float = 120.0) -> Iterator[int]:
    """Run `poolserve serve ARGS` until the block ends; yields its port once /health is 200."""
    with running_server_process(args, timeout=timeout) as (port, _):
        yield port


@contextlib.contextmanager
def running_server_process(
    args: Sequence[str], *, timeout: float = 120.0
) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """As `running_server`, yielding the port and the process (for its pid)."""
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "poolserve", "serve", "--port", str(port), *args]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + timeout
        while True:  # readiness: the process gives no other signal that it is listening
            if process.poll() is not None:
                stderr = process.stderr.read().decode() if process.stderr else ""
                raise RuntimeError(f"server exited with {process.returncode}:\n{stderr}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1):
                    break
            except (urllib.error.URLError, ConnectionError):
                if time.monotonic() > deadline:
                    raise TimeoutError("server did not become healthy") from None
                time.sleep(0.2)
        yield port, process
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
