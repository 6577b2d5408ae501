"""The hot routes: every POST route of ours served by one ASGI callable, the edge's work done once.

The edge (server/edge.py) is a stack of layers, each its own coroutine with its own `send` or
`receive` wrapper: metrics, the unexpected error's 500, the body limit, admission, then the
route dispatched directly. A one-sentence request of a static model (issue 61) spent more of
the GIL in those frames than in its lookup. Here a POST to one of our routes meets one
coroutine: the route found in one lookup, its headers read in one pass, the request id, the
API key, the body limit, admission, the route itself, its errors in their family's form and
the metrics, answered with one `send` of its start and one of its body.

Everything else goes to the stack as before, and so do the requests whose edge work the stack
does best: those with an `Origin` header where CORS is on (the browser's headers), and those
the tracing samples (their marks). The same responses, statuses and metrics come from both.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from poolserve.admission.api_keys import bearer_matches
from poolserve.admission.asked import Asked
from poolserve.errors import OverloadedError, PoolserveError
from poolserve.observe.metrics import Metrics
from poolserve.observe.tracing import Tracing
from poolserve.server.error_responses import (
    error_response,
    poolserve_error_response,
    unexpected_error_response,
)
from poolserve.server.middleware.admission_door import AdmissionMiddleware
from poolserve.server.middleware.auth import unauthorized_response
from poolserve.server.middleware.body_limit import BodyTooLargeError, body_too_large, counted
from poolserve.server.middleware.dispatch import Endpoint, direct_endpoints
from poolserve.server.responses import JSONBytesResponse
from poolserve.server.scope_keys import (
    ADMITTED_KEY,
    ASKED_KEY,
    MODEL_KEY,
    REQUEST_ID_KEY,
    SAMPLED_KEY,
    TICKET_KEY,
)
from poolserve.serving.serving_state import ServingState

# Responses sent as their two messages (a body sent at once, nothing after it).
PLAIN_RESPONSES = (Response, JSONBytesResponse)
# The headers the edge reads, in one pass over the request's.
EDGE_HEADERS = frozenset(
    {
        b"content-length",
        b"authorization",
        b"origin",
        b"traceparent",
        b"x-priority",
        b"x-request-timeout",
        b"x-expect-embedding-space",
    }
)


@dataclass(frozen=True)
class EdgePolicy:
    """What the edge asks of every request, as the server is configured."""

    max_bytes: int
    # The API keys (empty: no key is asked for), and the paths that take none.
    api_keys: Sequence[bytes] = ()
    open_paths: frozenset[str] = frozenset()
    open_prefixes: tuple[str, ...] = ()
    # Whether CORS is on (a request from a browser page goes through its layer).
    cors: bool = False
    tracing: Tracing | None = None

    def opens(self, path: str) -> bool:
        """Whether `path` takes no API key."""
        return path in self.open_paths or path.startswith(self.open_prefixes)


class HotRoutes:
    """Our POST routes (but `skipped`, the Batch API's uploads and batches) in one callable;
    the rest go to `edge`. `owner`: the application it is the stack of."""

    def __init__(
        self,
        edge: ASGIApp,
        *,
        owner: ASGIApp,
        routes: Sequence[BaseRoute],
        serving: ServingState,
        policy: EdgePolicy,
        skipped: tuple[str, ...] = (),
    ) -> None:
        self.app = edge
        self.owner = owner
        # Each route's endpoint, and whether it asks for an API key.
        self.table: dict[str, tuple[Endpoint, bool]] = {
            path: (endpoint, bool(policy.api_keys) and not policy.opens(path))
            for (method, path), endpoint in direct_endpoints(routes).items()
            if method == "POST" and not path.startswith(skipped)
        }
        self.metrics: Metrics = serving.metrics
        self.control = serving.admission
        self.new_request_id: Callable[[], str] = serving.new_request_id
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # What starlette's own `__call__` does before its stack (`serving_entry` skips it).
        scope["app"] = self.owner
        route = None
        if scope["type"] == "http" and scope["method"] == "POST":
            route = self.table.get(scope["path"])
        if route is None:
            await self.app(scope, receive, send)
            return
        headers: dict[bytes, bytes] = {}
        request_id = ""
        for name, value in scope["headers"]:
            if name in EDGE_HEADERS:
                headers.setdefault(name, value)  # sent twice: its first value, as starlette
            elif name == b"x-request-id" and not request_id and 0 < len(value) <= 200:
                request_id = value.decode("latin-1")
        policy = self.policy
        if policy.cors and b"origin" in headers:
            await self.app(scope, receive, send)
            return
        if policy.tracing is not None and policy.tracing.wants(_text(headers, b"traceparent")):
            scope[SAMPLED_KEY] = True
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        request_id = scope[REQUEST_ID_KEY] = request_id or self.new_request_id()
        answer = _Answer(send, request_id)
        try:
            await self._serve(scope, receive, answer, route, headers)
        finally:
            model = scope.get(MODEL_KEY, "")
            self.metrics.record_request(
                scope["method"], scope["path"], model, answer.status, started, request_id
            )

    async def _serve(
        self,
        scope: Scope,
        receive: Receive,
        answer: _Answer,
        route: tuple[Endpoint, bool],
        headers: Mapping[bytes, bytes],
    ) -> None:
        """The edge's checks in the stack's order, then the route (the stack's layers say why
        each is where it is)."""
        policy = self.policy
        endpoint, needs_key = route
        if needs_key and not bearer_matches(headers.get(b"authorization", b""), policy.api_keys):
            await answer.send_response(unauthorized_response(), scope, receive)
            return
        length_header = headers.get(b"content-length")
        length = int(length_header) if length_header and length_header.isdigit() else None
        if length is not None and length > policy.max_bytes:
            await answer.send_response(body_too_large(policy.max_bytes), scope, receive)
            return
        wanted = scope[ASKED_KEY] = Asked(
            _text(headers, b"x-priority"),
            _text(headers, b"x-request-timeout"),
            _text(headers, b"x-expect-embedding-space"),
        )
        try:
            ticket = await self.control.enter(length, wanted.door_wait(), wanted.door_lane())
        except OverloadedError as refusal:
            refused = error_response(refusal.status, refusal.message, headers=refusal.headers)
            await answer.send_response(refused, scope, receive)
            return
        scope[TICKET_KEY] = ticket
        scope[ADMITTED_KEY] = time.perf_counter()
        if length is None:  # a chunked body: counted against the limit and the ticket
            receive = AdmissionMiddleware.counting(counted(receive, policy.max_bytes), ticket)
        request = Request(scope, receive)
        try:  # the ticket is given back once the answer is sent (its bytes held till then)
            try:
                response = await endpoint(request)
            except PoolserveError as exc:
                response = poolserve_error_response(request, exc)
            except BodyTooLargeError:
                response = body_too_large(policy.max_bytes)
            except Exception:  # (nothing is sent before the endpoint returns)
                response = unexpected_error_response(request)
            await answer.send_response(response, scope, receive)
        finally:
            self.control.release(ticket)


def _text(headers: Mapping[bytes, bytes], name: bytes) -> str | None:
    value = headers.get(name)
    return None if value is None else value.decode("latin-1")


class _Answer:
    """The response's way out: its status noted, the request's id added to its headers."""

    def __init__(self, send: Send, request_id: str) -> None:
        self._send = send
        self._request_id = request_id.encode("latin-1")
        self.status = 500

    async def send_response(self, response: Response, scope: Scope, receive: Receive) -> None:
        if type(response) in PLAIN_RESPONSES and response.background is None:
            # The common case, sent as its two messages without the response's own frames.
            await self.send(
                {
                    "type": "http.response.start",
                    "status": response.status_code,
                    "headers": response.raw_headers,
                }
            )
            await self._send({"type": "http.response.body", "body": response.body})
            return
        await response(scope, receive, self.send)

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            headers = message["headers"]
            if not any(name == b"x-request-id" for name, _ in headers):
                message = {**message, "headers": [*headers, (b"x-request-id", self._request_id)]}
        await self._send(message)
