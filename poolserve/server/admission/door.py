"""The door: the ASGI middleware that admits every POST (the routes that do work) through
`AdmissionControl` before its body is read, or refuses it, and hands the route its ticket."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from poolserve.engine.lanes import DEFAULT_PRIORITY, header_priority
from poolserve.errors import OverloadedError, PoolserveError
from poolserve.server.admission.control import AdmissionControl
from poolserve.server.admission.tickets import Ticket
from poolserve.server.error_responses import error_response

# Where a request's ticket travels in its ASGI scope.
TICKET_KEY = "poolserve.admission"


def content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None


def asked_timeout(scope: Scope) -> float | None:
    """The `x-request-timeout` a client asked for, if it is a number of seconds (the handler
    refuses a bad one): it bounds the wait at the door too."""
    for name, value in scope.get("headers", ()):
        if name == b"x-request-timeout":
            try:
                seconds = float(value)
            except ValueError:
                return None
            return seconds if seconds > 0 else None
    return None


def asked_priority(scope: Scope) -> int:
    """The lane an `x-priority` header asks for (the handler refuses a bad one with a 400;
    until then it counts as the default)."""
    for name, value in scope.get("headers", ()):
        if name == b"x-priority":
            try:
                return header_priority(value.decode("latin-1")) or DEFAULT_PRIORITY
            except PoolserveError:
                return DEFAULT_PRIORITY
    return DEFAULT_PRIORITY


def ticket_of(scope: Scope) -> Ticket | None:
    ticket: Ticket | None = scope.get(TICKET_KEY)
    return ticket


class AdmissionMiddleware:
    """Every POST (the routes that do work) is admitted here, or refused before it is read."""

    def __init__(self, app: ASGIApp, *, control: AdmissionControl) -> None:
        self.app = app
        self.control = control

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        length = content_length(scope)
        try:
            ticket = await self.control.enter(length, asked_timeout(scope), asked_priority(scope))
        except OverloadedError as refusal:
            response = error_response(refusal.status, refusal.message, headers=refusal.headers)
            await response(scope, receive, send)
            return
        scope[TICKET_KEY] = ticket
        if length is None:
            receive = self._counting(receive, ticket)
        try:
            await self.app(scope, receive, send)
        finally:
            self.control.release(ticket)

    @staticmethod
    def _counting(receive: Receive, ticket: Ticket) -> Receive:
        """A chunked body reserves its bytes as they arrive (the route's body reader raises the
        429, which the route answers)."""
        received = 0

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                ticket.body_received(received)
            return message

        return counting_receive
