"""Real server processes for the hardening tests: start with flags (and injected faults), wait
until ready, read /stats and /metrics, stop with SIGTERM and report how the process ended."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import numpy as np
import psutil
import pytest

from poolserve.backends.torch_model.device import cpu_precisions
from tests.e2e.conftest import free_port, server_env, wait_until_ready
from tests.e2e.faults import ENV as FAULTS_ENV

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[2]
# Sentences the tests send (their references come from sentence-transformers).
TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Serving embedding models means batching requests from many clients.",
    "A library in the old town kept maps of coastlines that no longer exist.",
    "Rare words such as photosynthesis break into several pieces.",
    "In spring the orchard bloomed and the bees returned.",
    "Quantum computers promise speedups for chemistry simulations.",
    "How do I reset my password?",
    "Paris is the capital of France.",
    "Error correction remains the hard engineering problem of the decade.",
    "The farmer counted seventeen new lambs before breakfast.",
    "sunny weather today",
    "C++ templates vs Rust generics",
    "SELECT * FROM users WHERE id = 7;",
    "Tokenization splits words into pieces.",
    "The river keeps running toward the sea.",
    "Sailors trusted the stars more than their instruments.",
]
STOP_SECONDS = 30


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    url: str
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def rss(self) -> int:
        """The server process's resident memory, in bytes."""
        rss: int = psutil.Process(self.pid).memory_info().rss
        return rss

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

    def wait_idle(self, timeout: float = 30) -> dict[str, Any]:
        """Read /stats until no request is in flight and no token is in work (waiting, or in a
        batch that has not ended)."""
        return wait_for_stats(
            self, lambda s: s["requests_in_flight"] == 0 and s["tokens_in_work"] == 0, timeout
        )

    def wait_running(self, timeout: float = 30) -> dict[str, Any]:
        """Read /stats until a batch holds the runner and nothing waits behind it."""
        return wait_for_stats(
            self, lambda s: s["tokens_in_work"] > 0 and s["queued_items"] == 0, timeout
        )

    def wait_for_output(self, text: str | tuple[str, ...], timeout: float = 30) -> None:
        """Read the server's log until `text` (or one of several) shows up in it."""
        deadline = time.monotonic() + timeout
        texts = (text,) if isinstance(text, str) else text
        while not any(each in self.output() for each in texts):
            assert self.process.poll() is None, f"exited before logging {text!r}:\n{self.output()}"
            assert time.monotonic() < deadline, f"{text!r} not logged in {timeout} s"
            time.sleep(0.02)

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
    """`poolserve serve --dtype float32 --runners 1 --compile off --backend torch FLAGS` on a
    free port (through the fault launcher when `faults` is given); stopped with SIGTERM when
    the block ends."""
    port = free_port()
    log = directory / f"server-{port}.log"
    module = "tests.e2e.faults" if faults is not None else "poolserve"
    # One runner unless the test asks for more: the fault tests block "the" runner for a known
    # time (a later --runners in `flags` wins). Eager: with one runner `--compile auto` would
    # compile, which adds most of a minute per server.
    command = [
        *(sys.executable, "-m", module, "serve", "--port", str(port)),
        *("--dtype", "float32", "--runners", "1", "--compile", "off", "--backend", "torch"),
    ]
    if "--batch-dir" not in flags:  # the test's own folder, not the user's cache
        command += ["--batch-dir", str(directory / f"batches-{port}")]
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


# -- load -------------------------------------------------------------------------------------


@dataclass
class Outcome:
    """One request of a load run: which client sent it, what came back, how long it took."""

    client: int
    response: httpx.Response | BaseException
    seconds: float

    @property
    def status(self) -> int | None:
        return self.response.status_code if isinstance(self.response, httpx.Response) else None


def _client(url: str, connections: int) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    return httpx.AsyncClient(base_url=url, limits=limits, timeout=120)


async def _post(client: httpx.AsyncClient, index: int, body: bytes, path: str) -> Outcome:
    started = time.perf_counter()
    try:
        response: httpx.Response | BaseException = await client.post(
            path, content=body, headers={"content-type": "application/json"}
        )
    except httpx.HTTPError as exc:
        response = exc
    return Outcome(index, response, time.perf_counter() - started)


async def post_all(
    url: str, bodies: Sequence[bytes], path: str = "/v1/embeddings"
) -> list[Outcome]:
    """Every body posted at the same moment, each on its own connection."""
    async with _client(url, len(bodies)) as client:
        posts = (_post(client, index, body, path) for index, body in enumerate(bodies))
        return list(await asyncio.gather(*posts))


async def closed_loop(
    url: str,
    bodies: Sequence[bytes],
    seconds: float,
    *,
    max_requests: int = 5000,
    path: str = "/v1/embeddings",
) -> list[Outcome]:
    """One client per body, each posting it again as soon as it is answered (a 429 included),
    for `seconds` or until `max_requests` were sent in all."""
    deadline = time.monotonic() + seconds
    outcomes: list[Outcome] = []
    async with _client(url, len(bodies)) as client:

        async def loop(index: int, body: bytes) -> None:
            while time.monotonic() < deadline and len(outcomes) < max_requests:
                outcomes.append(await _post(client, index, body, path))

        await asyncio.gather(*(loop(index, body) for index, body in enumerate(bodies)))
    return outcomes


@contextmanager
def peak_rss(pid: int) -> Iterator[list[int]]:
    """Samples the process's RSS every 10 ms while the block runs; yields [peak bytes], filled
    in when the block ends (a measurement, not a wait on anything)."""
    process = psutil.Process(pid)
    peak = [process.memory_info().rss]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.01):
            peak[0] = max(peak[0], process.memory_info().rss)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield peak
    finally:
        done.set()
        sampler.join()
        peak[0] = max(peak[0], process.memory_info().rss)


def wait_for_stats(
    server: Server, condition: Callable[[dict[str, Any]], bool], timeout: float = 30
) -> dict[str, Any]:
    """Read /stats until `condition` holds (the engine's and admission's own counters)."""
    return _read_until(server.stats, condition, timeout)


def wait_for_metrics(
    server: Server, condition: Callable[[dict[Any, float]], bool], timeout: float = 30
) -> dict[Any, float]:
    """Read /metrics until `condition` holds of its samples (`parse_metrics`)."""
    return _read_until(lambda: parse_metrics(server.metrics()), condition, timeout)


def _read_until(read: Callable[[], T], condition: Callable[[T], bool], timeout: float) -> T:
    """The one polling loop: a server process exposes its counters only when asked."""
    deadline = time.monotonic() + timeout
    while not condition(value := read()):
        assert time.monotonic() < deadline, f"not reached in {timeout} s: {value}"
        time.sleep(0.02)
    return value


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
    """The sum of the samples named `name` whose labels include `labels` (a metric labelled
    by model sums over the models); 0 for a series that has not been created yet."""
    wanted = frozenset(labels.items())
    return sum(
        value for (key, series), value in metrics.items() if key == name and wanted <= series
    )


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


def native_lower_precision() -> str:
    """The lower precision this CPU runs natively, for a test server that needs speed more than
    float32's exactness: bfloat16 with AVX512-BF16 or AMX; else float32 (an AVX2 CPU only
    emulates bf16, at a fifth of float32's speed: a 200-client load then timed out)."""
    return "bfloat16" if "bfloat16" in cpu_precisions() else "float32"
