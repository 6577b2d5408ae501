"""The gRPC front end (`--grpc-port`): text-embeddings-inference's `tei.v1` services beside HTTP
in the same process and event loop, over the same models, admission, limits and API keys, with
gRPC health (`grpc.health.v1`) and server reflection, so grpcurl and Kubernetes gRPC probes work.

Health says SERVING for the server (`""`), Info and Tokenize, and for each of Embed, Predict and
Rerank that a model here serves (NOT_SERVING for the others, as TEI reports). Every service
turns NOT_SERVING when a model's engine dies or the server is told to stop; then the server
takes no new call and gives those running the shutdown's grace period (each answers
UNAVAILABLE itself when it ends, as HTTP's answer 503). API keys are checked on the `tei.v1`
services (`authorization: Bearer KEY` metadata); health and reflection stay open, like HTTP's
/health and /docs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from poolserve.admission.api_keys import bearer_matches
from poolserve.apis.tei.info import info_fields
from poolserve.serving.serving_state import ServingState
from poolserve.serving.shutdown import CLOSING_SECONDS
from poolserve.tei_grpc.calls import TeiServicer
from poolserve.tei_grpc.rpcs import RPCS, Rpc
from poolserve.tei_grpc.stubs import tei_pb2 as pb

logger = logging.getLogger("poolserve")

SERVICES = tuple(f"tei.v1.{name}" for name in ("Info", "Embed", "Predict", "Rerank", "Tokenize"))
# The HTTP route whose models make a service SERVING (Info and Tokenize always are).
SERVICE_ROUTES = {
    "tei.v1.Embed": "/embed",
    "tei.v1.Predict": "/predict",
    "tei.v1.Rerank": "/rerank",
}


class GrpcFrontEnd:
    def __init__(
        self,
        state: ServingState,
        address: str,
        *,
        api_keys: tuple[str, ...] = (),
    ) -> None:
        self.state = state
        self.address = address
        self._keys = [key.encode() for key in api_keys]
        self._servicer = TeiServicer(state)
        self._health = health.aio.HealthServicer()
        self._server: grpc.aio.Server | None = None
        self._draining: asyncio.Future[None] | None = None
        self._unhealthy: asyncio.Future[None] | None = None
        self.port = 0

    async def start(self) -> None:
        """Listen (a port in use fails the start), and turn healthy."""
        interceptors = [ApiKeyCheck(self._keys)] if self._keys else []
        server = grpc.aio.server(
            interceptors=interceptors,
            options=[
                # Never share the port with another process silently (gRPC's default does).
                ("grpc.so_reuseport", 0),
                ("grpc.max_receive_message_length", self.state.max_request_bytes or -1),
                ("grpc.max_send_message_length", -1),
            ],
        )
        server.add_generic_rpc_handlers(
            [
                grpc.method_handlers_generic_handler(service, methods)
                for service, methods in self._servicer.handlers().items()
            ]
        )
        info = grpc.unary_unary_rpc_method_handler(self._info)
        server.add_generic_rpc_handlers(
            [grpc.method_handlers_generic_handler("tei.v1.Info", {"Info": info})]
        )
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        reflection.enable_server_reflection(
            (
                *SERVICES,
                health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                reflection.SERVICE_NAME,
            ),
            server,
        )
        self.port = server.add_insecure_port(self.address)
        await server.start()
        self._server = server
        await self._set_health(serving=True)
        loop = asyncio.get_running_loop()

        def died() -> None:  # on the runner's thread
            loop.call_soon_threadsafe(self._engine_died)

        for service in self.state.models:
            service.core.when_dead(died)
        if not all(service.alive for service in self.state.models):  # died before it started
            self._engine_died()
        self._draining = asyncio.ensure_future(self._drain_when_told())

    def _engine_died(self) -> None:
        self._unhealthy = asyncio.ensure_future(self._set_health(serving=False))

    async def _set_health(self, serving: bool) -> None:
        serving_status = health_pb2.HealthCheckResponse.SERVING
        stopped = health_pb2.HealthCheckResponse.NOT_SERVING
        await self._health.set("", serving_status if serving else stopped)
        for service in SERVICES:
            route = SERVICE_ROUTES.get(service)
            served = route is None or bool(self.state.models_serving(route))
            await self._health.set(service, serving_status if serving and served else stopped)

    async def _drain_when_told(self) -> None:
        """When the server is told to stop: NOT_SERVING, new calls refused (UNAVAILABLE), and
        the running ones given the grace period (each answers by its end); then the server
        stops, ending what is left (health watches)."""
        grace = self.state.grace
        await grace.begun()
        await self._set_health(serving=False)
        # Past the grace period, each call still running answers UNAVAILABLE itself: it gets
        # the closing seconds to, as HTTP's requests do.
        await self.idle(grace.seconds + CLOSING_SECONDS)
        if self._server is not None:
            await self._server.stop(0)

    async def idle(self, timeout: float) -> None:
        """Return once no call is being served (or after `timeout` seconds)."""
        await self._servicer.idle(timeout)

    async def stop(self) -> None:
        """At the end of the app's life: drained (the app's own shutdown started the drain),
        or stopped at once when it was never told to stop (tests)."""
        if self._draining is not None and self.state.grace.started:
            await self._draining
        elif self._draining is not None:
            self._draining.cancel()
        if self._server is not None:
            await self._server.stop(0)

    async def _info(self, raw: bytes, context: grpc.aio.ServicerContext) -> bytes:
        """Info: the first model, as HTTP's /info describes it."""
        started = time.perf_counter()
        service = self.state.models.first
        fields = info_fields(self.state, service)
        kinds = {"reranker": pb.MODEL_TYPE_RERANKER, "classifier": pb.MODEL_TYPE_CLASSIFIER}
        kind = next(iter(fields["model_type"]))
        answer = pb.InfoResponse(
            version=fields["version"],
            model_id=fields["model_id"],
            model_dtype=fields["model_dtype"],
            model_type=kinds.get(kind, pb.MODEL_TYPE_EMBEDDING),
            max_concurrent_requests=fields["max_concurrent_requests"],
            max_input_length=fields["max_input_length"],
            max_batch_tokens=fields["max_batch_tokens"],
            max_batch_requests=fields["max_batch_requests"],
            max_client_batch_size=fields["max_client_batch_size"],
            tokenization_workers=fields["tokenization_workers"],
        ).SerializeToString()
        seconds = time.perf_counter() - started
        self.state.metrics.record_grpc("/tei.v1.Info/Info", "OK", service.served_name, seconds)
        return answer


class ApiKeyCheck(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """`authorization: Bearer KEY` on the tei.v1 services; health and reflection stay open."""

    def __init__(self, keys: list[bytes]) -> None:
        self._keys = keys
        self._kinds = {rpc.full_name: rpc for rpc in RPCS}

    async def intercept_service(
        self, continuation: Any, details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler:
        method: str = details.method
        if not method.startswith("/tei.v1."):
            return await continuation(details)
        for key, value in details.invocation_metadata or ():
            if key == "authorization":
                if bearer_matches(value.encode("latin-1"), self._keys):
                    return await continuation(details)
                break
        return _refusal(self._kinds.get(method))


def _refusal(rpc: Rpc | None) -> grpc.RpcMethodHandler:
    """A handler of the call's kind that answers UNAUTHENTICATED."""

    async def refuse(request: Any, context: grpc.aio.ServicerContext) -> None:
        await context.abort(
            grpc.StatusCode.UNAUTHENTICATED,
            "missing or wrong API key; send the metadata `authorization: Bearer <key>`",
        )

    kind = rpc.kind if rpc is not None else "unary"
    if kind == "stream":
        return grpc.stream_stream_rpc_method_handler(refuse)
    if kind == "collect":
        return grpc.stream_unary_rpc_method_handler(refuse)
    return grpc.unary_unary_rpc_method_handler(refuse)
