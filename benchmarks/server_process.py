"""Starting a server (`poolserve serve`, or a peer's command) as a child process on a free loopback
port, for benchmarks."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
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
def running_server(args: Sequence[str], *, timeout: float = 600.0) -> Iterator[int]:
    """Run `poolserve serve ARGS` until the block ends; yields its port once /health is 200."""
    with running_server_process(args, timeout=timeout) as (port, _):
        yield port


@contextlib.contextmanager
def running_server_process(
    args: Sequence[str], *, timeout: float = 600.0
) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """As `running_server`, yielding the port and the process (for its pid)."""
    port = free_port()
    command = [sys.executable, "-m", "poolserve", "serve", "--port", str(port), *args]
    with running_process(command, port, timeout=timeout) as process:
        yield port, process


@contextlib.contextmanager
def running_process(
    command: Sequence[str],
    port: int,
    *,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    timeout: float = 600.0,
) -> Iterator[subprocess.Popen[bytes]]:
    """Run `command` (a server listening on `port`) until the block ends; yields the process
    once GET /health answers 200. Its stderr is kept in a temporary file, shown if it fails."""
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}
    log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in the finally below
    process = subprocess.Popen(
        list(command), env=environment, cwd=cwd, stdout=subprocess.DEVNULL, stderr=log
    )
    try:
        deadline = time.monotonic() + timeout
        while True:  # readiness: the process gives no other signal that it is listening
            if process.poll() is not None:
                log.seek(0)
                stderr = log.read().decode(errors="replace")[-5000:]
                raise RuntimeError(f"server exited with {process.returncode}:\n{stderr}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1):
                    break
            except (urllib.error.URLError, OSError):
                # Refused before it listens; a read timeout while it loads (poolserve takes its
                # port first, so the connection waits in the backlog until it serves).
                if time.monotonic() > deadline:
                    raise TimeoutError("server did not become healthy") from None
                time.sleep(0.2)
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
