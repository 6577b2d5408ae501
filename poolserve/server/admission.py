"""Admission control: what admitted requests may cost, checked at the door; the rest is refused.

A request's cost is counted in tokens from the moment it is admitted until its response has been
sent. `--max-queued-tokens` bounds the sum over admitted requests, `--max-concurrent-requests`
their number. The cost is:

- at the door, before any of the body is read: one token per byte of its `Content-Length`. No
  tokenizer makes more tokens of a text than its UTF-8 bytes, and the quotes and comma around
  each input in JSON pay for its special tokens, so this bounds the tokens of an embedding
  request. A chunked body (no `Content-Length`) costs the bytes read so far, growing as it
  streams in. The estimate never exceeds the most one request can hold.
- once tokenized (chunk by chunk, before each chunk reaches the engine): its real tokens, each
  input counting at least `MIN_INPUT_TOKENS` (an input holds an output row however short it is),
  and the whole request at least one token per `BODY_BYTES_PER_TOKEN` bytes of body (its texts
  stay in memory until the response). A rerank query counts once per document, so a pair
  request can cost more than its estimate: its cost grows as its chunks are tokenized.

A request that would take the sum past the bound gets 429 with `Retry-After`: at the door, while
its chunked body streams in, or (a pair request that cost more than estimated) when a tokenized
chunk shows it. One that costs more than `--max-request-tokens` (at most half the bound, so that
one request never locks the others out) gets 413: split it.

Memory follows: every byte an admitted request holds (body, texts, token ids, outputs, the
response body) is proportional to its cost, which is how the README states the bound.

The event loop admits and releases; the CPU pool counts tokenized chunks: one lock.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from poolserve.config import MIN_INPUT_TOKENS
from poolserve.errors import OverloadedError, PayloadTooLargeError
from poolserve.server.errors import error_response

BODY_BYTES_PER_TOKEN = 8
# Where a request's ticket travels in its ASGI scope.
TICKET_KEY = "poolserve.admission"


@dataclass(eq=False)
class Ticket:
    """One admitted request's share of the budget, from admission until its response is sent."""

    control: AdmissionControl
    # Tokens this request holds of the budget now.
    reserved: int
    body_bytes: int
    admitted_at: float = field(default_factory=time.monotonic)
    # The real cost of the chunks tokenized so far.
    tokenized_cost: int = 0

    def body_received(self, total_bytes: int) -> None:
        """A chunked body has grown to `total_bytes`: reserve as much (429 if it does not fit)."""
        self.body_bytes = total_bytes
        self.control.resize(self, min(total_bytes, self.control.request_cap))

    def tokenized(self, lengths: Sequence[int], *, last: bool) -> None:
        """A chunk of this request's inputs was tokenized (chunks come in order); raises
        OverloadedError or PayloadTooLargeError if its cost no longer fits."""
        self.tokenized_cost += sum(max(length, MIN_INPUT_TOKENS) for length in lengths)
        if last:
            held = max(self.tokenized_cost, math.ceil(self.body_bytes / BODY_BYTES_PER_TOKEN))
            self.control.resize(self, held)
        elif self.tokenized_cost > self.reserved:
            self.control.resize(self, self.tokenized_cost)


class AdmissionControl:
    def __init__(
        self,
        token_rate: Callable[[], float],
        *,
        max_requests: int,
        max_tokens: int,
        max_request_tokens: int,
        largest_request_tokens: int,
    ) -> None:
        # Tokens per second the engine runs (measured), for Retry-After.
        self._token_rate = token_rate
        self.max_requests = max_requests
        self.max_tokens = max_tokens
        # The most one request may cost (more is a 413).
        self.max_request_tokens = min(max_request_tokens, max_tokens)
        # The most tokens a door estimate reserves: the most one request can hold.
        self.request_cap = min(self.max_request_tokens, largest_request_tokens)
        self._lock = threading.Lock()
        self.in_flight = 0
        self.admitted_tokens = 0
        self.peak_admitted_tokens = 0

    def retry_after(self) -> str:
        """Seconds until what is admitted now has run, at the engine's measured token rate."""
        rate = self._token_rate()
        seconds = self.admitted_tokens / rate if rate else 1.0
        return str(max(1, math.ceil(seconds)))

    def _overloaded(self, why: str) -> OverloadedError:
        return OverloadedError(
            f"the server is at capacity ({why}); retry after the time in Retry-After",
            headers={"retry-after": self.retry_after()},
        )

    def admit(self, content_length: int | None) -> Ticket:
        """A ticket for a new request whose body has `content_length` bytes (None: chunked), or
        OverloadedError."""
        estimate = min(content_length or 0, self.request_cap)
        with self._lock:
            if self.in_flight >= self.max_requests:
                why = f"{self.in_flight} requests in flight"
            elif self.admitted_tokens + estimate > self.max_tokens:
                why = self._room_message(estimate)
            else:
                self.in_flight += 1
                self._hold(estimate)
                return Ticket(self, estimate, content_length or 0)
        raise self._overloaded(why)  # its Retry-After reads the engines: not under the lock

    def resize(self, ticket: Ticket, tokens: int) -> None:
        """Make `ticket` hold `tokens`. Growing, it must fit: 413 when `tokens` pass what one
        request may cost (only a real cost can: estimates are capped), else 429 if the sum
        would pass the bound."""
        with self._lock:
            growth = tokens - ticket.reserved
            if growth > 0 and tokens > self.max_request_tokens:
                raise PayloadTooLargeError(
                    f"this request costs {tokens} tokens (at least {MIN_INPUT_TOKENS} per "
                    f"input), more than one request may ({self.max_request_tokens}, "
                    "--max-request-tokens): split it into smaller requests"
                )
            if growth <= 0 or self.admitted_tokens + growth <= self.max_tokens:
                ticket.reserved = tokens
                self._hold(growth)
                return
            why = self._room_message(tokens)
        raise self._overloaded(why)

    def release(self, ticket: Ticket) -> None:
        """The request's response is sent (or it failed): its cost leaves the budget."""
        with self._lock:
            self.in_flight -= 1
            self.admitted_tokens -= ticket.reserved
            ticket.reserved = 0

    def _hold(self, tokens: int) -> None:
        self.admitted_tokens += tokens
        self.peak_admitted_tokens = max(self.peak_admitted_tokens, self.admitted_tokens)

    def _room_message(self, tokens: int) -> str:
        return (
            f"this request needs {tokens} tokens and admitted requests hold "
            f"{self.admitted_tokens} of {self.max_tokens}"
        )


def content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None


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
            ticket = self.control.admit(length)
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
