"""The door: the ASGI middleware that admits every POST (the routes that do work) through
`AdmissionControl` before its body is read, or refuses it, and hands the route its ticket."""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from poolserve.admission.asked import Asked
from poolserve.admission.control import AdmissionControl
from poolserve.admission.tickets import Ticket
from poolserve.errors import OverloadedError
from poolserve.server.error_responses import error_response
from poolserve.server.scope_keys import ADMITTED_KEY, ASKED_KEY, TICKET_KEY


def content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None


ASKING_HEADERS = (b"x-priority", b"x-request-timeout", b"x-expect-embedding-space")


def asked(scope: Scope) -> Asked:
    """What the request's headers ask beside its body (read once, at the door)."""
    known: Asked | None = scope.get(ASKED_KEY)
    if known is not None:
        return known
    headers: dict[bytes, str] = {}
    for name, value in scope.get("headers", ()):
        if name in ASKING_HEADERS:  # a header sent twice: its first value, as starlette reads it
            headers.setdefault(name, value.decode("latin-1"))
    return Asked.of(lambda name: headers.get(name.encode()))


def asked_priority(scope: Scope) -> int:
    """The lane an `x-priority` header asks for (the handler refuses a bad one with a 400;
    until then it counts as the default)."""
    return asked(scope).door_lane()


def ticket_of(scope: Scope) -> Ticket | None:
    ticket: Ticket | None = scope.get(TICKET_KEY)
    return ticket


class AdmissionMiddleware:
    """Every POST (the routes that do work) is admitted here, or refused before it is read;
    but for the paths under `unpriced` (routes that run no model: the Batch API's files and
    batches, whose lines are admitted one by one as they run)."""

    def __init__(
        self, app: ASGIApp, *, control: AdmissionControl, unpriced: tuple[str, ...] = ()
    ) -> None:
        self.app = app
        self.control = control
        self.unpriced = unpriced

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] != "POST"
            or (self.unpriced and scope["path"].startswith(self.unpriced))
        ):
            await self.app(scope, receive, send)
            return
        length = content_length(scope)
        try:
            wanted = scope[ASKED_KEY] = asked(scope)
            ticket = await self.control.enter(length, wanted.door_wait(), wanted.door_lane())
        except OverloadedError as refusal:
            response = error_response(refusal.status, refusal.message, headers=refusal.headers)
            await response(scope, receive, send)
            return
        scope[TICKET_KEY] = ticket
        scope[ADMITTED_KEY] = time.perf_counter()
        if length is None:
            receive = self.counting(receive, ticket)
        try:
            await self.app(scope, receive, send)
        finally:
            self.control.release(ticket)

    @staticmethod
    def counting(receive: Receive, ticket: Ticket) -> Receive:
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
