"""An admitted request's share of admission's budget (`Ticket`), from admission until its response
is sent, and a request waiting at the door for one (`Waiter`), woken on its own event loop once
it is granted (`wake`). The control that hands them out is control.py."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from poolserve.config import MIN_INPUT_TOKENS
from poolserve.config.priorities import DEFAULT_PRIORITY


class Budget(Protocol):
    """What a ticket asks of the control that issued it (an `AdmissionControl`)."""

    @property
    def bytes_per_token(self) -> int: ...

    @property
    def request_cap(self) -> int: ...

    def resize(self, ticket: Ticket, tokens: int) -> None: ...

    def priced(self, ticket: Ticket, cost: int) -> None: ...


BODY_BYTES_PER_TOKEN = 8
# How many later requests may be let in past one that waits at the door for room.
MAX_PASSED_OVER = 8


@dataclass(eq=False)
class Ticket:
    """One admitted request's share of the budget, from admission until its response is sent."""

    control: Budget
    # Tokens this request holds of the budget now.
    reserved: int
    body_bytes: int
    # What the door reserved for it (its Content-Length; 0 for a chunked body).
    door_estimate: int = 0
    # Whether its real cost is known (all its inputs tokenized).
    priced: bool = False
    admitted_at: float = field(default_factory=time.monotonic)
    # The real cost of the chunks tokenized so far.
    tokenized_cost: int = 0
    # Its lane (engine/lanes.py), from its x-priority header, then its body's priority.
    priority: int = DEFAULT_PRIORITY

    def body_received(self, total_bytes: int) -> None:
        """A chunked body has grown to `total_bytes`: reserve as much (429 if it does not fit)."""
        self.body_bytes = total_bytes
        self.control.resize(self, min(total_bytes, self.control.request_cap))

    def tokenized(
        self, lengths: Sequence[int], *, last: bool, held_bytes: Sequence[int] = ()
    ) -> None:
        """A chunk of this request's inputs was prepared (chunks come in order): their tokens
        and the bytes each holds beyond them (an image: its pixels), priced at the control's
        bytes per token; raises OverloadedError or PayloadTooLargeError if its cost no longer
        fits."""
        per_token = self.control.bytes_per_token
        self.tokenized_cost += sum(
            max(length, MIN_INPUT_TOKENS, math.ceil(held / per_token))
            for length, held in zip(lengths, held_bytes or [0] * len(lengths), strict=True)
        )
        if last:
            held = max(self.tokenized_cost, math.ceil(self.body_bytes / BODY_BYTES_PER_TOKEN))
            self.control.resize(self, held)
            self.control.priced(self, held)
        elif self.tokenized_cost > self.reserved:
            self.control.resize(self, self.tokenized_cost)


@dataclass(eq=False)
class Waiter:
    """A request waiting at the door for room (its body not read yet)."""

    estimate: int
    content_length: int | None
    arrived_at: float
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Ticket]
    priority: int = DEFAULT_PRIORITY
    # Later requests admitted while this one waited (at most MAX_PASSED_OVER).
    passed_over: int = 0
    granted: Ticket | None = None
    timer: asyncio.TimerHandle | None = None
    waiting: bool = True


def wake(granted: list[Waiter]) -> None:
    """Outside the lock (from any thread): wake the granted requests on their event loop,
    which cancels their timers there (asyncio's handles are the loop's alone)."""
    for waiter in granted:
        # A closed loop (shutdown): nobody waits any more.
        with contextlib.suppress(RuntimeError):
            waiter.loop.call_soon_threadsafe(_set_ticket, waiter)


def _set_ticket(waiter: Waiter) -> None:
    """On the event loop: hand a granted request its ticket (unless it was cancelled, in which
    case its `enter` gives the ticket back)."""
    assert waiter.granted is not None
    if waiter.timer is not None:
        waiter.timer.cancel()
    if not waiter.future.done():
        waiter.future.set_result(waiter.granted)


class Departures:
    """Futures completed when the next admitted request leaves: a request the door turned away
    that may try again at once waits on one (a batch's line: server/batch_api/)."""

    def __init__(self) -> None:
        self._waiting: list[asyncio.Future[None]] = []

    def next(self) -> asyncio.Future[None]:
        """On the event loop."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(future)
        return future

    def left(self) -> None:
        """A request left (from any thread)."""
        if self._waiting:
            waiting, self._waiting = self._waiting, []
            for future in waiting:
                future.get_loop().call_soon_threadsafe(_set_none, future)


def _set_none(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
