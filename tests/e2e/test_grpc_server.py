"""`poolserve serve --grpc-port --otlp-endpoint` as a process: traces of HTTP and gRPC requests
received by a real OTLP endpoint under the caller's traceparent, overload and time limits as
status codes with the same admission as HTTP, a stream's messages batched with each other,
requests unharmed by a dead collector (its dropped spans counted), health that turns
NOT_SERVING when the server drains (and when its engine dies: test_hardening.py's dead runner),
and a drain that lets calls finish."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import grpc
import httpx
import pytest

from tests.e2e.conftest import free_port
from tests.e2e.grpc_peers import (
    NOT_SERVING,
    SERVING,
    OtlpReceiver,
    attribute,
    generated_client,
    otlp_receiver,
    watch_health,
)
from tests.e2e.harness import (
    Server,
    parse_metrics,
    running_server,
    wait_for_metrics,
)
from tests.e2e.test_hardening import SLOW_ID, SLOW_WORD

pytestmark = pytest.mark.slow  # real server processes

BLOCK_SECONDS = 1.5  # how long a batch holding SLOW_WORD keeps the runner busy
MAX_REQUESTS = 16  # a stream keeps at most 8 of them
STAGES = {"admission", "tokenize", "queue", "inference", "postprocess"}


@dataclass
class GrpcServer:
    server: Server
    channel: grpc.Channel
    pb: ModuleType
    stubs: ModuleType
    receiver: OtlpReceiver

    def embed(self, text: str, **options: Any) -> Any:
        stub = self.stubs.EmbedStub(self.channel)
        return stub.Embed.with_call(self.pb.EmbedRequest(inputs=text), **options)


@pytest.fixture(scope="module")
def tei(tmp_path_factory: pytest.TempPathFactory) -> tuple[ModuleType, ModuleType]:
    return generated_client(tmp_path_factory.mktemp("tei-client"))


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, tei: tuple[ModuleType, ModuleType]
) -> Iterator[GrpcServer]:
    """The bundled model with a slow word (its batch blocks the runner), gRPC, at most
    MAX_REQUESTS in flight (no wait at the door), and traces to a live receiver that a test
    stops later."""
    grpc_port = free_port()
    flags = [
        *("--grpc-port", str(grpc_port), "--shutdown-timeout", "10"),
        *("--max-concurrent-requests", str(MAX_REQUESTS), "--max-admission-wait", "0"),
        *("--trace-sample-ratio", "1"),
    ]
    env = {
        "OTEL_BSP_SCHEDULE_DELAY": "50",
        "OTEL_BSP_MAX_QUEUE_SIZE": "64",
        "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "16",
        "OTEL_SERVICE_NAME": "embedder-under-test",
    }
    faults = {"slow_id": SLOW_ID, "slow_delay": BLOCK_SECONDS}
    directory = tmp_path_factory.mktemp("grpc")
    with otlp_receiver() as (receiver, otlp_port):
        flags += ["--otlp-endpoint", f"http://127.0.0.1:{otlp_port}"]
        with (
            running_server(directory, flags, faults=faults, env=env) as server,
            grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel,
        ):
            yield GrpcServer(server, channel, *tei, receiver)


def trace_parent(trace_id: str, span_id: str, flags: str = "01") -> str:
    return f"00-{trace_id}-{span_id}-{flags}"


def test_a_request_is_one_trace_under_the_callers_traceparent(served: GrpcServer) -> None:
    """A caller's traceparent that says not sampled leaves its request untraced, though every
    request is (--trace-sample-ratio 1). Then, with the receiver stopped, requests are unharmed
    and the spans that do not fit the exporter's queue are counted as dropped."""
    http_trace, grpc_trace, caller = "a1" * 16, "b2" * 16, "c3" * 8
    unsampled_trace = "d4" * 16
    unsampled = httpx.post(
        f"{served.server.url}/embed",
        json={"inputs": "not sampled by its caller"},
        headers={"traceparent": trace_parent(unsampled_trace, caller, flags="00")},
        timeout=30,
    )
    assert unsampled.status_code == 200
    sent_at = time.time_ns()
    response = httpx.post(
        f"{served.server.url}/embed",
        json={"inputs": "traced over HTTP"},
        headers={"traceparent": trace_parent(http_trace, caller)},
        timeout=30,
    )
    assert response.status_code == 200
    _, call = served.embed(
        "traced over gRPC", metadata=(("traceparent", trace_parent(grpc_trace, caller)),)
    )
    answered_at = time.time_ns()
    request_ids = {
        http_trace: response.headers["x-request-id"],
        grpc_trace: dict(call.initial_metadata())["x-request-id"],
    }

    def complete(spans: list[Any]) -> bool:
        return all(
            {span.name for span in spans if span.trace_id.hex() == trace} >= STAGES
            for trace in request_ids
        )

    spans = served.receiver.wait_for(complete)
    # Spans are made and exported in the order the requests ended: the first one's would be in.
    assert not [span for span in spans if span.trace_id.hex() == unsampled_trace]
    assert "embedder-under-test" in served.receiver.service_names
    for trace, request_id in request_ids.items():
        mine = [span for span in spans if span.trace_id.hex() == trace]
        [root] = [span for span in mine if span.parent_span_id.hex() == caller]
        assert root.name in ("POST /embed", "tei.v1.Embed/Embed")
        assert attribute(root, "poolserve.request_id") == request_id
        # Real times: within the client's own clock readings around the two requests.
        assert sent_at <= root.start_time_unix_nano <= root.end_time_unix_nano <= answered_at
        children = [span for span in mine if span is not root]
        assert {span.name for span in children} == STAGES
        for child in children:
            assert child.parent_span_id == root.span_id
            assert root.start_time_unix_nano <= child.start_time_unix_nano
            assert child.start_time_unix_nano <= child.end_time_unix_nano
            assert child.end_time_unix_nano <= root.end_time_unix_nano
        [inference] = [span for span in children if span.name == "inference"]
        assert attribute(inference, "poolserve.batch.size") >= 1
        assert attribute(inference, "poolserve.batch.tokens") >= 5

    served.receiver.stop()
    dropped = ("poolserve_trace_spans_total", frozenset({("outcome", "dropped")}))
    before = parse_metrics(served.server.metrics()).get(dropped, 0.0)
    stub = served.stubs.EmbedStub(served.channel)
    messages = [served.pb.EmbedRequest(inputs=f"text {i}") for i in range(40)]
    answers = list(stub.EmbedStream(iter(messages)))
    assert len(answers) == 40 and all(answer.embeddings for answer in answers)
    # 40 requests make 240 spans; the exporter holds 64 while it retries the dead collector.
    wait_for_metrics(served.server, lambda metrics: metrics.get(dropped, 0.0) > before)


def block_runner(served: GrpcServer, pool: ThreadPoolExecutor) -> Any:
    """An HTTP request whose batch holds the runner for BLOCK_SECONDS, running once this
    returns (its future's result is the response)."""
    blocker = pool.submit(
        httpx.post,
        f"{served.server.url}/embed",
        json={"inputs": f"the {SLOW_WORD} blocks the runner"},
        timeout=30,
    )
    served.server.wait_running()
    return blocker


def test_overload_is_resource_exhausted_by_the_same_admission_as_http(served: GrpcServer) -> None:
    stub = served.stubs.EmbedStub(served.channel)
    with ThreadPoolExecutor(1) as pool:
        blocker = block_runner(served, pool)
        calls = [stub.Embed.future(served.pb.EmbedRequest(inputs=f"call {i}")) for i in range(24)]
        refused = []
        for call in calls:
            if call.exception() is not None:
                assert call.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, call.details()
                assert "retry-after" in dict(call.trailing_metadata())
                refused.append(call)
        assert blocker.result().status_code == 200
    # The blocker and the first MAX_REQUESTS - 1 calls were admitted; the rest refused at once.
    assert len(refused) == len(calls) - (MAX_REQUESTS - 1)
    served.server.wait_idle()
    assert served.embed("after the overload")[0].embeddings


def test_a_streams_messages_are_batched_together(served: GrpcServer) -> None:
    stub = served.stubs.EmbedStub(served.channel)
    before = served.server.stats()
    messages = [served.pb.EmbedRequest(inputs=f"streamed message {i}") for i in range(6)]
    with ThreadPoolExecutor(1) as pool:
        blocker = block_runner(served, pool)
        answers = list(stub.EmbedStream(iter(messages)))
        assert blocker.result().status_code == 200
    after = served.server.wait_idle()
    assert len(answers) == len(messages)
    # Behind the blocker, the six messages waited together and ran as one batch.
    assert after["items"] - before["items"] == 1 + len(messages)
    assert after["batches"] - before["batches"] == 2


def test_a_call_past_its_time_limit_is_deadline_exceeded(served: GrpcServer) -> None:
    slow = f"the {SLOW_WORD} is slow"
    with pytest.raises(grpc.RpcError) as raised:
        served.embed(slow, metadata=(("x-request-timeout", "0.3"),))
    assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert "time limit (0.3 s)" in raised.value.details()
    served.server.wait_idle()
    # A call whose own deadline passes while it waits behind a slow batch: the server drops
    # its work before it reaches the model.
    before = served.server.stats()
    with ThreadPoolExecutor(1) as pool:
        blocker = block_runner(served, pool)
        with pytest.raises(grpc.RpcError) as raised:
            served.embed("waits behind the slow batch", timeout=0.3)
        assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert blocker.result().status_code == 200
    after = served.server.wait_idle()
    assert after["items_skipped"] - before["items_skipped"] == 1
    assert after["items"] - before["items"] == 1  # the blocker alone


def test_sigterm_turns_health_not_serving_and_lets_calls_finish(served: GrpcServer) -> None:
    """Last: it stops the server."""
    health = watch_health(served.channel)
    assert health.get(timeout=10) == SERVING
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(served.embed, f"the {SLOW_WORD} finishes during the drain")
        served.server.wait_running()
        served.server.process.send_signal(signal.SIGTERM)
        assert health.get(timeout=10) == NOT_SERVING
        with pytest.raises(grpc.RpcError) as raised:
            served.embed("too late")
        assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
        answer, _ = running.result(timeout=30)
        assert answer.embeddings
    assert served.server.process.wait(30) == 0
