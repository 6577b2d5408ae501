"""What the gRPC tests talk to and hear from: clients generated from text-embeddings-inference's
`tei.proto` by grpcio-tools (as a user generates them, independent of the server's own stubs),
a real OTLP/gRPC trace receiver that decodes what it is sent with opentelemetry-proto, and a
follower of a server's gRPC health."""

from __future__ import annotations

import importlib
import queue
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_tools import protoc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
PROTO = Path(__file__).resolve().parents[2] / "poolserve/tei_grpc/proto/tei.proto"


def generated_client(directory: Path) -> tuple[ModuleType, ModuleType]:
    """`tei_pb2` and `tei_pb2_grpc`, generated into `directory` from the vendored proto."""
    command = [
        "protoc",
        f"--proto_path={PROTO.parent}",
        f"--python_out={directory}",
        f"--grpc_python_out={directory}",
        str(PROTO),
    ]
    assert protoc.main(command) == 0
    sys.path.insert(0, str(directory))
    try:
        return importlib.import_module("tei_pb2"), importlib.import_module("tei_pb2_grpc")
    finally:
        sys.path.remove(str(directory))


def attribute(span: Any, key: str) -> Any:
    """A span attribute's value (None if it has none)."""
    for each in span.attributes:
        if each.key == key:
            value = each.value
            return getattr(value, value.WhichOneof("value"))
    return None


class OtlpReceiver(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
    """Collects every span exported to it; `wait_for` blocks until they satisfy a condition."""

    def __init__(self) -> None:
        self.spans: list[Any] = []
        self.service_names: set[str] = set()
        self._changed = threading.Condition()
        self._server = grpc.server(ThreadPoolExecutor(2))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(self, self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()

    def stop(self) -> None:
        """Stop listening: the exporter's calls fail from now on."""
        self._server.stop(None)

    def Export(self, request: Any, context: Any) -> Any:
        with self._changed:
            for resource_spans in request.resource_spans:
                self.service_names.add(attribute(resource_spans.resource, "service.name"))
                for scope_spans in resource_spans.scope_spans:
                    self.spans.extend(scope_spans.spans)
            self._changed.notify_all()
        return trace_service_pb2.ExportTraceServiceResponse()

    def wait_for(self, found: Callable[[list[Any]], bool], timeout: float = 30) -> list[Any]:
        with self._changed:
            assert self._changed.wait_for(lambda: found(self.spans), timeout), (
                f"not received in {timeout} s; got {[span.name for span in self.spans]}"
            )
            return list(self.spans)


@contextmanager
def otlp_receiver() -> Iterator[tuple[OtlpReceiver, int]]:
    """A receiver listening on a free loopback port, stopped when the block ends."""
    receiver = OtlpReceiver()
    try:
        yield receiver, receiver.port
    finally:
        receiver.stop()


def watch_health(channel: grpc.Channel) -> queue.Queue[int]:
    """The server's health as it changes (grpc.health.v1 Watch), from a thread."""
    changes: queue.Queue[int] = queue.Queue()
    stream = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(service=""))

    def follow() -> None:
        try:
            for answer in stream:
                changes.put(answer.status)
        except grpc.RpcError:
            pass

    threading.Thread(target=follow, daemon=True).start()
    return changes
