"""Production hardening, over real server processes: overload, limits, cancellation, timeouts,
failure isolation, a dying runner, graceful shutdown, API keys and metrics.

Each server runs `python -m poolserve serve` (or the fault launcher, tests/e2e/faults.py) on a
free port of 127.0.0.1 with small limits, so that every limit is easy to hit. Every load loop is
bounded in requests and in time.
"""

from __future__ import annotations

import asyncio
import random
import signal
import statistics
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import httpx
import numpy as np
import psutil
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.e2e.conftest import free_port
from tests.e2e.grpc_peers import NOT_SERVING, SERVING, watch_health
from tests.e2e.harness import (
    TEXTS,
    Server,
    assert_openai_error,
    base64_vectors,
    embedding_vectors,
    parse_metrics,
    running_server,
    sample,
    wait_for_stats,
)
from tests.reference import FP32_COSINE, MAX_LEN, MODEL_ID, assert_close_vectors, st_encode

EMBED = "/v1/embeddings"
# Words whose token ids the fault launcher watches for (checked against the server's /tokenize).
SLOW_WORD, SLOW_ID = "chunk", 20000  # a batch holding it sleeps: it blocks the runner
POISON_WORD, POISON_ID = "fielder", 25000  # a batch holding it raises
GARBAGE_WORD, GARBAGE_ID = "zeppelin", 22116  # a batch holding it returns strings

pytestmark = pytest.mark.slow  # real server processes


def token_ids(server: Server, text: str) -> list[int]:
    response = httpx.post(f"{server.url}/tokenize", json={"prompt": text}, timeout=10)
    assert response.status_code == 200, response.text
    ids: list[int] = response.json()["tokens"]
    return ids


# -- 1. overload ---------------------------------------------------------------------------------

OVERLOAD_CLIENTS = 80
OVERLOAD_MAX_REQUESTS = 1600
OVERLOAD_SECONDS = 4.0
INPUTS_PER_REQUEST = 6


def p50_latency(client: httpx.Client, count: int = 10) -> float:
    """Median seconds of `count` sequential one-input requests on a kept-alive connection."""
    latencies = []
    for index in range(count):
        started = time.perf_counter()
        response = client.post(EMBED, json={"input": TEXTS[index % len(TEXTS)]})
        latencies.append(time.perf_counter() - started)
        assert response.status_code == 200, response.text
    return statistics.median(latencies)


async def offer_load(url: str) -> list[tuple[list[int], httpx.Response | BaseException]]:
    """OVERLOAD_CLIENTS clients posting back to back, bounded in requests and in time."""
    deadline = time.monotonic() + OVERLOAD_SECONDS
    rng = random.Random(7)
    plans = [
        rng.sample(range(len(TEXTS)), INPUTS_PER_REQUEST) for _ in range(OVERLOAD_MAX_REQUESTS)
    ]
    results: list[tuple[list[int], httpx.Response | BaseException]] = []
    limits = httpx.Limits(
        max_connections=OVERLOAD_CLIENTS, max_keepalive_connections=OVERLOAD_CLIENTS
    )

    async def client_loop(client: httpx.AsyncClient) -> None:
        while plans and time.monotonic() < deadline:
            plan = plans.pop()
            body = {"input": [TEXTS[i] for i in plan], "encoding_format": "base64"}
            try:
                results.append((plan, await client.post(EMBED, json=body)))
            except httpx.HTTPError as exc:
                results.append((plan, exc))

    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30) as client:
        await asyncio.gather(*(client_loop(client) for _ in range(OVERLOAD_CLIENTS)))
    return results


def test_overload_is_refused_with_429_and_the_server_recovers(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    flags = ["--max-concurrent-requests", "8", "--max-queued-tokens", "2048"]
    flags += ["--max-client-batch-size", "64"]
    with running_server(tmp_path_factory.mktemp("overload"), flags) as server:
        process = psutil.Process(server.pid)
        with httpx.Client(base_url=server.url, timeout=30) as client:
            # References: each text alone, on an idle server.
            reference = np.concatenate(
                [embedding_vectors(client.post(EMBED, json={"input": text})) for text in TEXTS]
            )
            idle_p50 = p50_latency(client)
            before = parse_metrics(server.metrics())
            rss_before = process.memory_info().rss

            results = asyncio.run(offer_load(server.url))

            rss_after = process.memory_info().rss
            after_p50 = p50_latency(client)
            after = parse_metrics(server.metrics())

        errors = [result for _, result in results if isinstance(result, BaseException)]
        assert not errors, f"{len(errors)} transport errors, e.g. {errors[0]!r}"
        responses = [(plan, r) for plan, r in results if isinstance(r, httpx.Response)]
        statuses = [r.status_code for _, r in responses]
        assert not [s for s in statuses if s >= 500], sorted(set(statuses))
        assert set(statuses) <= {200, 429}, sorted(set(statuses))
        refused = [r for _, r in responses if r.status_code == 429]
        served = [(plan, r) for plan, r in responses if r.status_code == 200]
        assert refused, "ten times the capacity was offered and nothing was refused"
        assert len(served) >= 20, f"only {len(served)} of {len(responses)} requests served"

        for response in refused:
            error = assert_openai_error(response, 429)
            assert error["type"] == "rate_limit_error"
            retry_after = response.headers["retry-after"]
            assert retry_after.isdigit() and int(retry_after) >= 1, retry_after
        for plan, response in served:
            assert_close_vectors(base64_vectors(response), reference[plan], FP32_COSINE)

        assert rss_after - rss_before < 300 * 2**20, (rss_before, rss_after)
        assert after_p50 <= 2 * idle_p50 + 0.005, (idle_p50, after_p50)

        def delta(name: str, **labels: str) -> float:
            return sample(after, name, **labels) - sample(before, name, **labels)

        assert delta("poolserve_rejected_requests_total", reason="overloaded") == len(refused)
        requests = "poolserve_requests_total"
        assert delta(requests, route=EMBED, status="429") == len(refused)
        # The served load plus the 10 sequential requests that measured latency afterwards.
        assert delta(requests, route=EMBED, status="200") == len(served) + 10


# -- 2. limits before work -----------------------------------------------------------------------

CLIENT_BATCH = 4
MAX_BYTES = 300_000
CHAR_CAP = MAX_LEN * 64


@pytest.fixture(scope="module")
def limits_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    flags = ["--max-client-batch-size", str(CLIENT_BATCH), "--max-request-bytes", str(MAX_BYTES)]
    with running_server(tmp_path_factory.mktemp("limits"), flags) as server:
        yield server


def test_too_many_inputs_is_413_before_any_work(limits_server: Server) -> None:
    url = limits_server.url
    before = limits_server.stats()
    too_many = [TEXTS[i] for i in range(CLIENT_BATCH + 1)]
    response = httpx.post(f"{url}{EMBED}", json={"input": too_many}, timeout=30)
    error = assert_openai_error(response, 413)
    assert f"({CLIENT_BATCH})" in error["message"] and "5 items" in error["message"], error
    assert error["param"] == "input"

    response = httpx.post(
        f"{url}/rerank", json={"query": "capital", "documents": too_many}, timeout=30
    )
    error = assert_openai_error(response, 413)
    assert f"({CLIENT_BATCH})" in error["message"], error
    assert error["param"] == "documents"
    assert limits_server.stats()["items"] == before["items"], "refused requests reached the model"

    # At the limit, both are served.
    at_limit = too_many[:CLIENT_BATCH]
    assert len(embedding_vectors(httpx.post(f"{url}{EMBED}", json={"input": at_limit}))) == 4
    response = httpx.post(f"{url}/rerank", json={"query": "capital", "documents": at_limit})
    assert response.status_code == 200, response.text
    assert len(response.json()["results"]) == CLIENT_BATCH


def padded_body(size: int) -> bytes:
    """A valid embeddings request of exactly `size` bytes (JSON allows trailing whitespace)."""
    body = b'{"input": "padded to size"}'
    return body + b" " * (size - len(body))


def test_oversized_body_is_413_json_with_content_length_and_chunked(limits_server: Server) -> None:
    url = f"{limits_server.url}{EMBED}"
    headers = {"content-type": "application/json"}
    with httpx.Client(timeout=30) as client:
        at_limit = client.post(url, content=padded_body(MAX_BYTES), headers=headers)
        assert at_limit.status_code == 200, at_limit.text

        response = client.post(url, content=padded_body(MAX_BYTES + 1), headers=headers)
        error = assert_openai_error(response, 413)
        assert str(MAX_BYTES) in error["message"], error

        def chunks() -> Iterator[bytes]:
            body = padded_body(2 * MAX_BYTES)
            for start in range(0, len(body), 32 * 1024):
                yield body[start : start + 32 * 1024]

        response = client.post(url, content=chunks(), headers=headers)
        assert "content-length" not in response.request.headers
        assert response.request.headers["transfer-encoding"] == "chunked"
        error = assert_openai_error(response, 413)
        assert str(MAX_BYTES) in error["message"], error

        def small_chunks() -> Iterator[bytes]:
            yield b'{"input": '
            yield b'"chunked but small"}'

        response = client.post(url, content=small_chunks(), headers=headers)
        assert response.status_code == 200, response.text
    assert httpx.get(f"{limits_server.url}/health").status_code == 200


def test_a_long_input_is_judged_by_its_tokens_from_a_bounded_prefix(
    limits_server: Server,
) -> None:
    url = f"{limits_server.url}{EMBED}"
    text = "a" + " a" * (CHAR_CAP // 2)  # CHAR_CAP + 1 characters, 8,193 tokens
    assert len(text) == CHAR_CAP + 1
    error = assert_openai_error(httpx.post(url, json={"input": text}, timeout=30), 400)
    assert "has more than 256 tokens" in error["message"], error
    assert "truncate_prompt_tokens" in error["message"]
    response = httpx.post(url, json={"input": text, "truncate_prompt_tokens": -1}, timeout=30)
    assert len(embedding_vectors(response)) == 1
    assert response.json()["usage"]["prompt_tokens"] == 256
    # Characters are not tokens: two words apart is two words, however many spaces.
    spaced = "hello" + " " * (CHAR_CAP * 2) + "world"
    response = httpx.post(url, json={"input": spaced}, timeout=30)
    assert response.status_code == 200, response.text
    assert response.json()["usage"]["prompt_tokens"] == 4


@pytest.mark.parametrize(
    ("opening", "closing"),
    [(b"[", b"]"), (b'{"a":', b"}")],
    ids=["lists", "objects"],
)
def test_deeply_nested_json_is_400_and_the_server_stays_healthy(
    limits_server: Server, opening: bytes, closing: bytes
) -> None:
    depth = 100_000 if opening == b"[" else 40_000
    body = b'{"input": ' + opening * depth + b"1" + closing * depth + b"}"
    assert len(body) <= MAX_BYTES
    url = limits_server.url
    response = httpx.post(
        f"{url}{EMBED}", content=body, headers={"content-type": "application/json"}, timeout=30
    )
    assert_openai_error(response, 400)
    assert httpx.get(f"{url}/health").status_code == 200
    assert len(embedding_vectors(httpx.post(f"{url}{EMBED}", json={"input": "still fine"}))) == 1


# -- 3. cancellation and time limits -------------------------------------------------------------

BATCH_DELAY = 0.3  # seconds every batch of the slowed model sleeps
SLOW_FLAGS = ["--max-batch-size", "1"]


def test_disconnected_clients_have_their_queued_items_skipped(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    faults = {"delay": BATCH_DELAY}
    with running_server(tmp_path_factory.mktemp("cancel"), SLOW_FLAGS, faults=faults) as server:
        before_metrics = parse_metrics(server.metrics())
        before = server.stats()
        requests, inputs = 5, 20
        submitted = requests * inputs
        with ThreadPoolExecutor(requests + 1) as pool:
            blocker = pool.submit(
                httpx.post, f"{server.url}{EMBED}", json={"input": "blocker"}, timeout=30
            )

            def abandon(index: int) -> type[BaseException] | None:
                body = {"input": [f"abandoned {index} {i}" for i in range(inputs)]}
                try:
                    httpx.post(f"{server.url}{EMBED}", json=body, timeout=0.6)
                except httpx.ReadTimeout as exc:
                    return type(exc)
                return None

            abandoned = list(pool.map(abandon, range(requests)))
            assert abandoned == [httpx.ReadTimeout] * requests
            assert len(embedding_vectors(blocker.result())) == 1
        after = server.wait_idle()

        processed = after["items"] - before["items"]
        skipped = after["items_skipped"] - before["items_skipped"]
        # Without cancellation the runner would work through all 100 items (30 s); within the
        # 0.6 s the clients waited it can run about two.
        assert processed <= 1 + 5, (processed, skipped)
        assert processed + skipped == 1 + submitted, (processed, skipped)
        metrics = parse_metrics(server.metrics())
        reason = {"reason": "client_disconnected"}
        disconnected = sample(metrics, "poolserve_rejected_requests_total", **reason)
        assert (
            disconnected - sample(before_metrics, "poolserve_rejected_requests_total", **reason)
            == requests
        )


@pytest.fixture(scope="module")
def timeout_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    flags = [*SLOW_FLAGS, "--request-timeout", "0.5"]
    faults = {"delay": BATCH_DELAY}
    with running_server(tmp_path_factory.mktemp("timeout"), flags, faults=faults) as server:
        yield server


def timed_post(
    server: Server, body: Any, headers: dict[str, str] | None = None
) -> tuple[httpx.Response, float]:
    started = time.perf_counter()
    response = httpx.post(f"{server.url}{EMBED}", json=body, headers=headers, timeout=30)
    return response, time.perf_counter() - started


def test_request_timeout_is_504_and_cancels_the_work(timeout_server: Server) -> None:
    server = timeout_server
    # One input takes 0.3 s: within the 0.5 s limit.
    response, _ = timed_post(server, {"input": "in time"})
    assert len(embedding_vectors(response)) == 1
    before = server.wait_idle()

    # Four inputs take 1.2 s: answered 504 when the limit passes (not before, and not once the
    # work is done), and the rest is not run.
    response, elapsed = timed_post(server, {"input": [f"too slow {i}" for i in range(4)]})
    error = assert_openai_error(response, 504)
    assert error["type"] == "timeout_error"
    assert "(0.5 s)" in error["message"], error
    assert 0.5 <= elapsed < 4 * BATCH_DELAY, elapsed
    after = server.wait_idle()
    assert after["items"] - before["items"] <= 2, (before, after)
    assert after["items_skipped"] - before["items_skipped"] >= 2, (before, after)

    # A client may not extend the server's limit.
    response, elapsed = timed_post(
        server, {"input": [f"still too slow {i}" for i in range(4)]}, {"x-request-timeout": "5"}
    )
    assert "(0.5 s)" in assert_openai_error(response, 504)["message"]
    assert elapsed < 4 * BATCH_DELAY, elapsed


def test_x_request_timeout_header_shortens_the_limit(timeout_server: Server) -> None:
    server = timeout_server
    server.wait_idle()
    response, elapsed = timed_post(server, {"input": "short limit"}, {"x-request-timeout": "0.2"})
    error = assert_openai_error(response, 504)
    assert "(0.2 s)" in error["message"], error
    assert 0.2 <= elapsed < 0.5, elapsed  # before the server's own limit

    # The `request_timeout` body field does the same.
    server.wait_idle()
    response, elapsed = timed_post(server, {"input": "short limit", "request_timeout": 0.1})
    assert "(0.1 s)" in assert_openai_error(response, 504)["message"]
    assert 0.1 <= elapsed < 0.5, elapsed


@pytest.mark.parametrize("value", ["abc", "0", "-1", "nan", ""])
def test_bad_x_request_timeout_header_is_400(timeout_server: Server, value: str) -> None:
    response, _ = timed_post(timeout_server, {"input": "bad header"}, {"x-request-timeout": value})
    error = assert_openai_error(response, 400)
    assert "x-request-timeout" in error["message"], error


# -- 4. failure isolation ------------------------------------------------------------------------

BLOCK_SECONDS = 1.0  # how long a batch holding SLOW_WORD keeps the runner busy


def check_marker_words(server: Server) -> None:
    """The fault launcher watches token ids; the server's tokenizer must give them."""
    assert token_ids(server, SLOW_WORD) == [101, SLOW_ID, 102]
    assert token_ids(server, POISON_WORD) == [101, POISON_ID, 102]
    assert token_ids(server, GARBAGE_WORD) == [101, GARBAGE_ID, 102]


def post_while_blocked(server: Server, bodies: list[Any], timeout: float = 30) -> list[Any]:
    """Block the runner with a slow batch, then post `bodies` at once so that they wait together
    and share the next batch. Returns the blocker's response, then one outcome per body (a
    response, or the exception), each with the seconds it took."""

    def post(body: Any) -> tuple[httpx.Response | BaseException, float]:
        started = time.perf_counter()
        try:
            response: httpx.Response | BaseException = httpx.post(
                f"{server.url}{EMBED}", json=body, timeout=timeout
            )
        except httpx.HTTPError as exc:
            response = exc
        return response, time.perf_counter() - started

    with ThreadPoolExecutor(len(bodies) + 1) as pool:
        blocker = pool.submit(post, {"input": f"the {SLOW_WORD} blocks the runner"})
        server.wait_running()
        outcomes = list(pool.map(post, bodies))
        return [blocker.result(), *outcomes]


def test_poisoned_input_fails_only_its_own_request(
    tmp_path_factory: pytest.TempPathFactory, st_model: Any
) -> None:
    faults = {
        "slow_id": SLOW_ID,
        "slow_delay": BLOCK_SECONDS,
        "poison_id": POISON_ID,
        "poison": "error",
        "garbage_id": GARBAGE_ID,
    }
    with running_server(tmp_path_factory.mktemp("poison"), faults=faults) as server:
        check_marker_words(server)
        clean = [[TEXTS[2 * i], TEXTS[2 * i + 1]] for i in range(6)]
        poisoned = {"input": ["a clean line", f"the {POISON_WORD} caught it"]}
        before = server.stats()
        blocker, poisoned_outcome, *clean_outcomes = post_while_blocked(
            server, [poisoned, *({"input": texts} for texts in clean)]
        )
        after = server.stats()

        assert len(embedding_vectors(blocker[0])) == 1
        error = assert_openai_error(poisoned_outcome[0], 500)
        assert error["type"] == "internal_server_error"
        assert "inference failed" in error["message"], error
        assert "RuntimeError" not in poisoned_outcome[0].text
        for texts, (response, _) in zip(clean, clean_outcomes, strict=True):
            assert_close_vectors(
                embedding_vectors(response), st_encode(st_model, texts), FP32_COSINE
            )
        # The shared batch failed, then each request ran alone: only the poisoned one failed.
        assert after["failed_batches"] - before["failed_batches"] == 2, (before, after)

        assert httpx.get(f"{server.url}/health").status_code == 200
        response = httpx.post(f"{server.url}{EMBED}", json={"input": TEXTS[:3]}, timeout=30)
        assert_close_vectors(embedding_vectors(response), st_encode(st_model, TEXTS[:3]))

        # An error no handler expects is answered, and the connection serves the next request
        # (one connection: a client pool would send it there).
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        with httpx.Client(base_url=server.url, limits=limits, timeout=30) as client:
            broken = client.post(EMBED, json={"input": [f"a {GARBAGE_WORD} sentence"]})
            error = assert_openai_error(broken, 500)
            assert "server log" in error["message"] and "not a number" not in broken.text
            assert broken.headers.get("connection") != "close"
            tei = client.post("/embed", json={"inputs": f"a {GARBAGE_WORD}"})
            assert tei.status_code == 500 and set(tei.json()) == {"error", "error_type"}
            for _ in range(3):
                assert len(embedding_vectors(client.post(EMBED, json={"input": TEXTS[:2]}))) == 2
        output = server.output()
    assert "retrying each request alone" in output
    assert "unexpected error on /v1/embeddings" in output


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_dead_runner_turns_health_red_and_requests_fail_fast(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    faults = {
        "slow_id": SLOW_ID,
        "slow_delay": BLOCK_SECONDS,
        "poison_id": POISON_ID,
        "poison": "fatal",
    }
    grpc_port = free_port()  # its gRPC health must tell the runner's death too
    flags = ["--grpc-port", str(grpc_port)]
    with (
        running_server(tmp_path_factory.mktemp("fatal"), flags, faults=faults) as server,
        grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel,
    ):
        check_marker_words(server)
        health_changes = watch_health(channel)
        assert health_changes.get(timeout=10) == SERVING
        bodies = [
            {"input": f"the {POISON_WORD} kills it"},
            {"input": "waiting 1"},
            {"input": "waiting 2"},
        ]
        blocker, *outcomes = post_while_blocked(server, bodies, timeout=10)
        assert len(embedding_vectors(blocker[0])) == 1
        # The batch that killed the runner and everything waiting fail with 503, without hanging.
        for response, seconds in outcomes:
            error = assert_openai_error(response, 503)
            assert "runner" in error["message"], error
            assert seconds < BLOCK_SECONDS + 1.0, seconds

        health = httpx.get(f"{server.url}/health", timeout=5)
        assert_openai_error(health, 503)
        assert health_changes.get(timeout=10) == NOT_SERVING
        check = health_pb2_grpc.HealthStub(channel).Check
        assert check(health_pb2.HealthCheckRequest(service="tei.v1.Embed")).status == NOT_SERVING
        for text in ("after death 1", "after death 2", "after death 3"):
            started = time.perf_counter()
            response = httpx.post(f"{server.url}{EMBED}", json={"input": text}, timeout=5)
            assert time.perf_counter() - started < 1.0
            assert "not running" in assert_openai_error(response, 503)["message"]
        metrics = parse_metrics(server.metrics())
        assert sample(metrics, "poolserve_runner_alive") == 0
        assert server.process.poll() is None, "the server process itself must keep answering"
        assert server.stop() == 0, server.output()


# -- 5. graceful shutdown ------------------------------------------------------------------------

SHUTDOWN_TIMEOUT = 10


def test_sigterm_finishes_admitted_requests_then_exits_0(
    tmp_path_factory: pytest.TempPathFactory, st_model: Any
) -> None:
    delay, count = 0.15, 20
    flags = [*SLOW_FLAGS, "--shutdown-timeout", str(SHUTDOWN_TIMEOUT)]
    texts = [f"{TEXTS[i % len(TEXTS)]} ({i})" for i in range(count)]
    directory = tmp_path_factory.mktemp("shutdown")
    with running_server(directory, flags, faults={"delay": delay}) as server:
        with ThreadPoolExecutor(count) as pool:
            futures = [
                pool.submit(httpx.post, f"{server.url}{EMBED}", json={"input": t}, timeout=30)
                for t in texts
            ]
            # Every request is admitted before the signal, and most of them still wait.
            # (a request of one input is answered or in flight)
            stats = wait_for_stats(server, lambda s: s["requests_in_flight"] + s["items"] >= count)
            assert stats["queued_items"] >= count // 2, "the load should still be running"
            server.process.send_signal(signal.SIGTERM)
            signalled = time.monotonic()

            server.wait_for_output("Shutting down")
            with pytest.raises(httpx.ConnectError):
                httpx.post(f"{server.url}{EMBED}", json={"input": "too late"}, timeout=5)

            responses = [future.result() for future in futures]
        code = server.process.wait(SHUTDOWN_TIMEOUT + 5)
        exited_after = time.monotonic() - signalled
    for response in responses:
        assert response.status_code == 200, response.text
    vectors = np.concatenate([embedding_vectors(response) for response in responses])
    assert_close_vectors(vectors, st_encode(st_model, texts), FP32_COSINE, texts)
    output = server.output()
    assert code == 0, output
    assert exited_after <= SHUTDOWN_TIMEOUT + 2, exited_after
    assert "Application shutdown complete" in output
    assert "Traceback" not in output, output


def test_requests_cut_off_by_the_shutdown_timeout_get_503_json(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Work that cannot finish within --shutdown-timeout is cancelled at the deadline: those
    clients should hear that the server shut down (503, OpenAI shape), not get a bare 500."""
    delay, count, shutdown_timeout = 0.3, 12, 1
    flags = [*SLOW_FLAGS, "--shutdown-timeout", str(shutdown_timeout)]
    directory = tmp_path_factory.mktemp("shutdown-deadline")
    with running_server(directory, flags, faults={"delay": delay}) as server:
        with ThreadPoolExecutor(count) as pool:
            futures = [
                pool.submit(httpx.post, f"{server.url}{EMBED}", json={"input": f"t{i}"}, timeout=30)
                for i in range(count)
            ]
            wait_for_stats(
                server,
                lambda s: (
                    s["requests_in_flight"] + s["items"] >= count and s["queued_items"] >= count - 2
                ),
            )
            server.process.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            responses = [future.result() for future in futures]
        code = server.process.wait(shutdown_timeout + 10)
        exited_after = time.monotonic() - signalled
    output = server.output()
    assert code == 0, output
    assert exited_after <= shutdown_timeout + 2, exited_after
    statuses = [response.status_code for response in responses]
    assert 200 in statuses and set(statuses) - {200}, statuses  # some finished, some were cut
    for response in responses:
        if response.status_code != 200:
            error = assert_openai_error(response, 503)
            assert "shut" in error["message"], error
    assert "Traceback" not in output, output


HUNG_SECONDS = 3600.0  # a forward pass that never ends, as far as the tests can tell


def start_hung_request(server: Server, pool: ThreadPoolExecutor) -> Any:
    """A request whose batch hangs in the forward pass; returns once it holds the runner."""
    check_marker_words(server)
    body = {"input": f"the {SLOW_WORD} hangs the runner"}
    hung = pool.submit(httpx.post, f"{server.url}{EMBED}", json=body, timeout=60)
    server.wait_running()
    return hung


def test_a_hung_forward_pass_cannot_hold_up_shutdown(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """--shutdown-timeout bounds the whole shutdown: the request stuck in the model and the one
    waiting behind it are answered 503 when it passes, and the process exits (1: it had to
    abandon the runner) instead of waiting on the forward pass."""
    shutdown_timeout = 2
    faults = {"slow_id": SLOW_ID, "slow_delay": HUNG_SECONDS}
    flags = ["--shutdown-timeout", str(shutdown_timeout)]
    directory = tmp_path_factory.mktemp("hung")
    with running_server(directory, flags, faults=faults) as server, ThreadPoolExecutor(2) as pool:
        hung = start_hung_request(server, pool)
        waiting = pool.submit(
            httpx.post, f"{server.url}{EMBED}", json={"input": "behind it"}, timeout=60
        )
        wait_for_stats(server, lambda s: s["requests_in_flight"] == 2)
        server.process.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        code = server.process.wait(shutdown_timeout + 15)
        exited_after = time.monotonic() - signalled
        responses = [hung.result(), waiting.result()]
    output = server.output()
    for response in responses:
        assert "shut down" in assert_openai_error(response, 503)["message"]
    assert code == 1, output
    assert exited_after < shutdown_timeout + 5, exited_after
    assert "still busy after" in output and "abandoning it" in output, output
    assert "Traceback" not in output, output


def test_a_second_signal_exits_at_once(tmp_path_factory: pytest.TempPathFactory) -> None:
    """While a graceful shutdown waits (here on a hung forward pass, with a long timeout), a
    second SIGTERM ends the process at once."""
    faults = {"slow_id": SLOW_ID, "slow_delay": HUNG_SECONDS}
    flags = ["--shutdown-timeout", "600"]
    directory = tmp_path_factory.mktemp("second")
    with running_server(directory, flags, faults=faults) as server, ThreadPoolExecutor(1) as pool:
        hung = start_hung_request(server, pool)
        server.process.send_signal(signal.SIGTERM)
        server.wait_for_output("Shutting down")
        assert server.process.poll() is None, "the first signal must not end it at once"
        server.process.send_signal(signal.SIGTERM)
        code = server.process.wait(15)
        with pytest.raises(httpx.HTTPError):
            hung.result()  # the connection closed with the process
    assert code == 128 + signal.SIGTERM, server.output()
    assert "second SIGTERM: exiting now" in server.output()


# -- 6. API keys ---------------------------------------------------------------------------------

KEYS = ("sk-hardening-first-5c1e9a", "sk-hardening-second-84d2b7")
ENV_KEYS = ("sk-hardening-env-a-17f0", "sk-hardening-env-b-92c3")


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def test_api_keys_guard_the_api_and_never_reach_the_log(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    flags = ["--api-key", KEYS[0], "--api-key", KEYS[1], "--access-log", "--log-level", "debug"]
    with running_server(tmp_path_factory.mktemp("auth"), flags) as server:
        url = f"{server.url}{EMBED}"
        body = {"input": "guarded"}
        before = parse_metrics(server.metrics())  # /metrics is open without --protect-metrics
        refusals = [
            httpx.post(url, json=body),
            httpx.post(url, json=body, headers=bearer("sk-hardening-wrong")),
            httpx.post(url, json=body, headers={"authorization": f"Basic {KEYS[0]}"}),
            httpx.post(url, json=body, headers={"authorization": KEYS[0]}),
            httpx.post(url, json=body, headers=bearer(KEYS[0] + "x")),
            httpx.get(f"{server.url}/v1/models"),
        ]
        for response in refusals:
            error = assert_openai_error(response, 401)
            assert error["type"] == "authentication_error"
            assert response.headers["www-authenticate"] == "Bearer"
            assert KEYS[0] not in response.text and KEYS[1] not in response.text

        for key in KEYS:
            assert len(embedding_vectors(httpx.post(url, json=body, headers=bearer(key)))) == 1
        lower = {"authorization": f"bearer {KEYS[1]}"}
        assert len(embedding_vectors(httpx.post(url, json=body, headers=lower))) == 1
        assert httpx.get(f"{server.url}/health").status_code == 200
        after = parse_metrics(server.metrics())
        unauthorized = {"reason": "unauthorized"}
        rejected = "poolserve_rejected_requests_total"
        assert sample(after, rejected, **unauthorized) - sample(
            before, rejected, **unauthorized
        ) == len(refusals)
        output = server.output()
    # The access log and the debug line per request show the requests, never the keys.
    assert '"POST /v1/embeddings HTTP/1.1" 401' in output, output
    assert "POST /v1/embeddings 401" in output and "POST /v1/embeddings 200" in output, output
    for key in KEYS:
        assert key not in output


def test_api_keys_from_the_environment_and_protected_metrics(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    env = {"POOLSERVE_API_KEY": f"{ENV_KEYS[0]}, {ENV_KEYS[1]}"}
    directory = tmp_path_factory.mktemp("auth-env")
    with running_server(directory, ["--protect-metrics"], env=env) as server:
        url = f"{server.url}{EMBED}"
        for key in ENV_KEYS:
            response = httpx.post(url, json={"input": "from env"}, headers=bearer(key))
            assert len(embedding_vectors(response)) == 1
        assert_openai_error(httpx.post(url, json={"input": "x"}, headers=bearer(KEYS[0])), 401)
        response = httpx.get(f"{server.url}/metrics")
        assert_openai_error(response, 401)
        assert response.headers["www-authenticate"] == "Bearer"
        assert "poolserve_requests_total" in server.metrics(headers=bearer(ENV_KEYS[1]))
        assert httpx.get(f"{server.url}/health").status_code == 200
        output = server.output()
    for key in ENV_KEYS:
        assert key not in output


# -- 7. metrics and timing headers ---------------------------------------------------------------


def test_metrics_count_exactly_what_was_served(limits_server: Server) -> None:
    server = limits_server
    before = parse_metrics(server.metrics())
    sent = 7
    for index in range(sent):
        response = httpx.post(f"{server.url}{EMBED}", json={"input": TEXTS[index]})
        assert len(embedding_vectors(response)) == 1
    too_many = {"input": TEXTS[: CLIENT_BATCH + 1]}
    assert_openai_error(httpx.post(f"{server.url}{EMBED}", json=too_many), 413)
    assert_openai_error(httpx.get(f"{server.url}/no-such-route-7f3a"), 404)
    after = parse_metrics(server.metrics())

    def delta(name: str, **labels: str) -> float:
        return sample(after, name, **labels) - sample(before, name, **labels)

    assert delta("poolserve_requests_total", route=EMBED, status="200") == sent
    assert delta("poolserve_requests_total", route=EMBED, status="413") == 1
    assert delta("poolserve_rejected_requests_total", reason="too_large") == 1
    # Unknown paths share one label, so clients cannot create series.
    assert delta("poolserve_requests_total", route="other", status="404") == 1
    assert not [key for key in after if "no-such-route" in str(key)]
    assert delta("poolserve_request_duration_seconds_count", route=EMBED) == sent + 1
    assert delta("poolserve_request_duration_seconds_sum", route=EMBED) > 0
    # One input per request, sent one after another: one batch each.
    assert delta("poolserve_batch_size_count") == sent
    assert delta("poolserve_batch_size_bucket", le="1") == sent
    for stage in ("tokenize", "queue", "inference", "postprocess"):
        assert delta("poolserve_stage_seconds_count", stage=stage) == sent, stage
    assert delta("poolserve_stage_seconds_sum", stage="inference") > 0
    assert ("poolserve_queue_items", frozenset({("model", MODEL_ID)})) in after
    assert sample(after, "poolserve_queue_items") == 0
    assert sample(after, "poolserve_runner_alive") == 1
    assert sample(after, "poolserve_runners_alive") == sample(after, "poolserve_runners") == 1
    assert delta("poolserve_runner_items_total", runner="0") == sent
    assert delta("poolserve_runner_batches_total", runner="0") == sent
    # The loop-lag gauge samples all along (every 50 ms) and the loop stayed free.
    assert sample(after, "poolserve_event_loop_lag_seconds_count") > 0
    assert sample(after, "poolserve_event_loop_lag_seconds_bucket", le="0.5") == sample(
        after, "poolserve_event_loop_lag_seconds_count"
    )


def test_timing_headers_and_request_ids(limits_server: Server) -> None:
    url = f"{limits_server.url}{EMBED}"
    response = httpx.post(url, json={"input": TEXTS[:3]}, headers={"x-request-id": "hardening-42"})
    assert response.status_code == 200, response.text
    assert response.headers["x-request-id"] == "hardening-42"
    times = {
        name: float(response.headers[f"x-{name}-time"]) for name in ("queue", "inference", "total")
    }
    assert all(value >= 0 for value in times.values()), times
    assert times["inference"] > 0, times
    assert times["total"] + 0.01 >= times["queue"] + times["inference"], times

    generated = {httpx.post(url, json={"input": "id"}).headers["x-request-id"] for _ in range(2)}
    assert len(generated) == 2 and all(generated), generated
