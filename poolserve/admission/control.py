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

A request that would take the sum past the bound waits at the door, its body unread, for room:
requests of a lane are let in in arrival order as the admitted ones are tokenized (their cost
shrinks to the real one) and answered, a smaller one passing a larger one of its lane or a lower
one at most `MAX_PASSED_OVER` times (higher lanes pass it freely: see below).
It gets 429 with `Retry-After` when it has waited `--max-admission-wait` seconds, or at once when
the engine's measured token rate says that it would (the work admitted and waiting before it,
priced at what tokenized requests have really cost against their door estimates: a moving
average, or the last few requests' ratio where all of them cost less, as image requests do,
whose base64 bytes are far fewer tokens; an image counts what its pixels hold), or when the
waiting and admitted requests number `--max-concurrent-requests`. With no wait allowed, it gets
429 at once. Once admitted, a chunked body that streams in past the room, or a pair request that
costs more than estimated (when a tokenized chunk shows it), gets 429 too. One that costs more
than `--max-request-tokens` (at most half the bound, so that one request never locks the others
out) gets 413: split it.

Priority lanes (engine/lanes.py): a request's lane is known at the door from its `x-priority`
header, or once its body is parsed from the body's `priority` (`relane`). Background requests
(below the default lane) hold at most `background_share` of the bound in all; the rest is kept
for the default lane and above. Waiting at the door, a higher lane's request is let in before a
lower one's, and a new request passes the waiting ones of lower lanes; a request whose body
names a background priority when background requests hold their whole share gets 429 (sent in
the header instead, it would have waited at the door). 429s and waiting requests are counted by
lane.

Memory follows: every byte an admitted request holds (body, texts, token ids, outputs, the
response body) is proportional to its cost, which is how docs/production.md states the bound.

The event loop admits and releases; the CPU pool counts tokenized chunks: one lock. A waiting
request is a future on the event loop, resolved by whichever thread made room for it. The door
is `server/middleware/admission_door.py`.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import Counter
from collections.abc import Callable

from poolserve.admission.pricing import CostForecast
from poolserve.admission.tickets import Departures, Ticket, Waiter, wake
from poolserve.admission.waiting_line import WaitingLine
from poolserve.config import MIN_INPUT_TOKENS
from poolserve.config.priorities import DEFAULT_PRIORITY, LOWEST_PRIORITY, is_background
from poolserve.errors import OverloadedError, PayloadTooLargeError


class AdmissionControl:
    def __init__(
        self,
        token_rate: Callable[[], float],
        *,
        bytes_per_token: int,
        max_requests: int,
        max_tokens: int,
        max_request_tokens: int,
        largest_request_tokens: int,
        max_wait: float = 0.0,
        cost_per_estimate: float = 0.25,
        background_share: float = 1.0,
    ) -> None:
        self._token_rate = token_rate  # tokens/s the engine runs: Retry-After, expected waits
        # What one admitted token may hold (the memory bound's): bytes an input holds beyond
        # its tokens (an image's pixels) are priced at this many a token.
        self.bytes_per_token = bytes_per_token
        self.max_requests = max_requests
        self.max_tokens = max_tokens
        # The most one request may cost (more is a 413).
        self.max_request_tokens = min(max_request_tokens, max_tokens)
        # The most tokens a door estimate reserves: the most one request can hold.
        self.request_cap = min(self.max_request_tokens, largest_request_tokens)
        self.max_wait = max_wait  # seconds a request may wait at the door (0: refused at once)
        # The most background requests may hold in all.
        self.background_tokens = int(max_tokens * background_share)
        self._lock = threading.Lock()
        self.in_flight = 0
        self.admitted_tokens = 0
        self.peak_admitted_tokens = 0
        # What admitted background requests hold, and 429s by lane.
        self.admitted_background = 0
        self.refused_by_lane: Counter[int] = Counter()
        self._line = WaitingLine()  # requests waiting at the door
        self.waited = 0
        self._costs = CostForecast(cost_per_estimate)
        self.departures = Departures()

    @property
    def waiting(self) -> int:
        return len(self._line)

    def waiting_by_lane(self) -> dict[int, int]:
        """Requests waiting at the door, by lane."""
        with self._lock:
            return self._line.by_lane()

    def retry_after(self, rate: float | None = None) -> str:
        """Seconds until what is admitted and waiting now has run, at the engine's measured
        token rate."""
        rate = self._token_rate() if rate is None else rate
        return _seconds(self._work(0) / rate if rate else 1.0)

    def _work(self, estimate: int, priority: int = LOWEST_PRIORITY) -> float:
        """Under the lock: the work before room for a request of lane `priority` is made (the
        waiting requests of lower lanes do not count: it goes in before them)."""
        waiting = self._line.tokens_ahead(priority)
        return self._costs.work(self.admitted_tokens, waiting, estimate)

    def _overloaded(
        self, why: str, priority: int, retry_after: str | None = None
    ) -> OverloadedError:
        """The 429 of a request of lane `priority`, counted (outside the lock)."""
        with self._lock:
            self.refused_by_lane[priority] += 1
        return OverloadedError(
            f"the server is at capacity ({why}); retry after the time in Retry-After",
            headers={"retry-after": retry_after or self.retry_after()},
        )

    def admit(self, content_length: int | None, priority: int = DEFAULT_PRIORITY) -> Ticket:
        """A ticket for a new request whose body has `content_length` bytes (None: chunked),
        now or never: OverloadedError if it does not fit (or others wait before it)."""
        estimate = self._estimate(content_length)
        with self._lock:
            ticket = self._admit_now(estimate, content_length, priority)
            why = "" if ticket else self._refusal(estimate, priority)
        if ticket is None:
            # Its Retry-After reads the engines: not under the lock.
            raise self._overloaded(why, priority)
        return ticket

    async def enter(
        self,
        content_length: int | None,
        max_wait: float | None = None,
        priority: int = DEFAULT_PRIORITY,
    ) -> Ticket:
        """`admit`, except that a request that does not fit waits for room, in arrival order,
        up to `max_wait` seconds (default and most: the control's). Refused at once (429,
        Retry-After from the expected wait) when the requests waiting already number
        `max_requests` with those admitted, or when the engine's measured rate says that room
        will not come in time."""
        wait = self.max_wait if max_wait is None else min(max_wait, self.max_wait)
        estimate = self._estimate(content_length)
        with self._lock:
            ticket = self._admit_now(estimate, content_length, priority)
            if ticket is not None:
                return ticket
            if wait <= 0 or self.in_flight + len(self._line) >= self.max_requests:
                why = self._refusal(estimate, priority)
            else:
                why = ""
        if why:
            raise self._overloaded(why, priority)
        rate = self._token_rate()  # outside the lock: it reads the engines
        loop = asyncio.get_running_loop()
        waiter = Waiter(
            estimate, content_length, time.monotonic(), loop, loop.create_future(), priority
        )
        retry_after = None
        with self._lock:
            # In line first: one that may pass the others gets in without a forecast.
            self._line.join(waiter)
            granted = self._grant_waiters()
            if waiter.granted is None:
                expected = self._expected_wait(estimate, rate, priority)
                if expected > wait:
                    self._line.leave(waiter)
                    why = (
                        f"this request needs {estimate} tokens and the work admitted and "
                        f"waiting before it takes about {expected:.0f} s at the measured "
                        f"{rate:.0f} tokens/s, more than it may wait ({wait:g} s, "
                        "--max-admission-wait)"
                    )
                    retry_after = _seconds(expected)
                else:
                    self.waited += 1
        wake([each for each in granted if each is not waiter])
        if why:
            raise self._overloaded(why, priority, retry_after)
        if waiter.granted is not None:  # it passed the requests waiting before it
            return waiter.granted
        waiter.timer = loop.call_later(wait, self._expire, waiter, wait)
        try:
            return await waiter.future
        except asyncio.CancelledError:
            self._gave_up(waiter)
            raise

    def _gave_up(self, waiter: Waiter) -> None:
        """`waiter`'s request went (its client, or the server's shutdown): out of the line, or
        its ticket back if it had just got in."""
        if waiter.timer is not None:
            waiter.timer.cancel()
        with self._lock:
            ticket = waiter.granted
            granted = []
            if waiter.waiting:
                self._line.leave(waiter)
                granted = self._grant_waiters()  # it may have held the others back
        wake(granted)
        if ticket is not None:
            self.release(ticket)

    def resize(self, ticket: Ticket, tokens: int) -> None:
        """Make `ticket` hold `tokens`. Growing, it must fit: 413 when `tokens` pass what one
        request may cost (only a real cost can: estimates are capped), else 429 if the sum
        would pass the bound. Shrinking lets waiting requests in."""
        granted: list[Waiter] = []
        with self._lock:
            growth = tokens - ticket.reserved
            if growth > 0 and tokens > self.max_request_tokens:
                raise PayloadTooLargeError(
                    f"this request costs {tokens} tokens (at least {MIN_INPUT_TOKENS} per "
                    "input; an image what its pixels hold), more than one request may "
                    f"({self.max_request_tokens}, "
                    "--max-request-tokens): split it into smaller requests"
                )
            if growth <= 0 or self._fits(growth, ticket.priority, requests=0):
                self._hold(growth, ticket.priority)
                ticket.reserved = tokens
                if growth < 0:
                    granted = self._grant_waiters()
                why = ""
            else:
                why = self._room_message(tokens, ticket.priority)
        if why:
            raise self._overloaded(why, ticket.priority)
        wake(granted)

    def relane(self, ticket: Ticket, priority: int) -> None:
        """The request's body names its lane: move `ticket` there. Into the background lanes it
        must fit their share, else 429 (the lane was not known at the door, where it would have
        waited)."""
        granted: list[Waiter] = []
        with self._lock:
            moving = is_background(priority) != is_background(ticket.priority)
            if (
                moving
                and is_background(priority)
                and not self._fits(ticket.reserved, priority, requests=0, total=False)
            ):
                why = (
                    f"background requests (priority above 0) hold {self.admitted_background} of "
                    f"the {self.background_tokens} tokens they may (--background-share); send "
                    "the priority in the x-priority header to wait at the door for room instead"
                )
            else:
                why = ""
                if moving:
                    self._hold(-ticket.reserved, ticket.priority)
                    self._hold(ticket.reserved, priority)
                ticket.priority = priority
                if moving:
                    granted = self._grant_waiters()
        if why:
            raise self._overloaded(why, priority)
        wake(granted)

    def release(self, ticket: Ticket) -> None:
        """The request's response is sent (or it failed): its cost leaves the budget, and
        waiting requests that now fit are let in."""
        with self._lock:
            self.in_flight -= 1
            self._hold(-ticket.reserved, ticket.priority)
            ticket.reserved = 0
            if not ticket.priced:
                ticket.priced = True
                self._costs.priced(ticket.door_estimate, None)
            granted = self._grant_waiters() if self._line else []
        wake(granted)
        self.departures.left()

    def _estimate(self, content_length: int | None) -> int:
        return min(content_length or 0, self.request_cap)

    def _fits(self, tokens: int, priority: int, *, requests: int = 1, total: bool = True) -> bool:
        """Under the lock: whether `requests` more requests holding `tokens` more in lane
        `priority` fit the bounds (`total`: the whole bound too, not only the lane's share)."""
        return (
            self.in_flight + requests <= self.max_requests
            and (not total or self.admitted_tokens + tokens <= self.max_tokens)
            and (
                not is_background(priority)
                or self.admitted_background + tokens <= self.background_tokens
            )
        )

    def _admit_now(self, estimate: int, content_length: int | None, priority: int) -> Ticket | None:
        """Under the lock: a ticket if the request fits and nobody of its lane or a higher one
        waits before it."""
        if self._line.holds_lane(priority) or not self._fits(estimate, priority):
            return None
        return self._ticket(estimate, content_length, time.monotonic(), priority)

    def _ticket(
        self, estimate: int, content_length: int | None, arrived_at: float, priority: int
    ) -> Ticket:
        self.in_flight += 1
        self._hold(estimate, priority)
        self._costs.admitted(estimate)
        return Ticket(
            self, estimate, content_length or 0, estimate, admitted_at=arrived_at, priority=priority
        )

    def _grant_waiters(self) -> list[Waiter]:
        """Under the lock: let in the waiting requests that fit (waiting_line.py)."""

        def admit(waiter: Waiter) -> None:
            waiter.granted = self._ticket(
                waiter.estimate, waiter.content_length, waiter.arrived_at, waiter.priority
            )

        return self._line.let_in(
            lambda: self.in_flight < self.max_requests,
            lambda waiter: self._fits(waiter.estimate, waiter.priority),
            admit,
        )

    def _expire(self, waiter: Waiter, waited: float) -> None:
        """On the event loop: `waiter` has waited as long as it may; refuse it unless it got
        in, and let in those it held back."""
        with self._lock:
            if not waiter.waiting:
                return
            self._line.leave(waiter)
            granted = self._grant_waiters()
            why = (
                f"this request needs {waiter.estimate} tokens and waited {waited:g} s "
                "(--max-admission-wait) without room"
            )
        wake(granted)
        if not waiter.future.done():
            waiter.future.set_exception(self._overloaded(why, waiter.priority))

    def _expected_wait(self, estimate: int, rate: float, priority: int) -> float:
        """Under the lock: seconds until a request of `estimate` joining the queue in lane
        `priority` would fit: the work admitted and waiting before it, at what tokenized
        requests really cost, past the room the bound leaves for it (for a background request,
        its lanes' share). 0 while the engine has no measured rate yet."""
        if not rate:
            return 0.0
        # Its own estimate is among the waiting (priced at the average): count it once, whole.
        work = self._work(estimate, priority) - self._costs.ratio() * estimate
        room = self.background_tokens if is_background(priority) else self.max_tokens
        return max(0.0, work - room) / rate

    def priced(self, ticket: Ticket, cost: int) -> None:
        """`ticket`'s real cost is known: learn how costs relate to door estimates."""
        with self._lock:
            if ticket.priced:
                return
            ticket.priced = True
            self._costs.priced(ticket.door_estimate, cost)

    def _hold(self, tokens: int, priority: int) -> None:
        """Under the lock: admitted requests of lane `priority` hold `tokens` more (or less)."""
        self.admitted_tokens += tokens
        self.peak_admitted_tokens = max(self.peak_admitted_tokens, self.admitted_tokens)
        if is_background(priority):
            self.admitted_background += tokens

    def _refusal(self, tokens: int, priority: int) -> str:
        if self.in_flight + len(self._line) >= self.max_requests:
            return f"{self.in_flight} requests in flight and {len(self._line)} waiting"
        return self._room_message(tokens, priority)

    def _room_message(self, tokens: int, priority: int) -> str:
        if is_background(priority) and self.admitted_background + tokens > self.background_tokens:
            return (
                f"this background request needs {tokens} tokens and background requests hold "
                f"{self.admitted_background} of the {self.background_tokens} they may "
                "(--background-share of --max-queued-tokens)"
            )
        return (
            f"this request needs {tokens} tokens and admitted requests hold "
            f"{self.admitted_tokens} of {self.max_tokens}"
        )


def _seconds(seconds: float) -> str:
    return str(max(1, math.ceil(seconds)))
