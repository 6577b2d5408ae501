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
requests are let in in arrival order as the admitted ones are tokenized (their cost shrinks to
the real one) and answered, a smaller one passing a larger one at most `MAX_PASSED_OVER` times.
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

Memory follows: every byte an admitted request holds (body, texts, token ids, outputs, the
response body) is proportional to its cost, which is how docs/production.md states the bound.

The event loop admits and releases; the CPU pool counts tokenized chunks: one lock. A waiting
request is a future on the event loop, resolved by whichever thread made room for it. The door
itself, the ASGI middleware that asks here for every POST, is `server/admission/door.py`.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import deque
from collections.abc import Callable

from poolserve.config import MIN_INPUT_TOKENS
from poolserve.errors import OverloadedError, PayloadTooLargeError
from poolserve.server.admission.tickets import (
    MAX_PASSED_OVER,
    Ticket,
    Waiter,
    wake,
)

# The weight of each tokenized request in the moving average of cost over door estimate.
COST_AVERAGING = 0.05
# The last requests whose cost over estimate, all lower than the average, prices the next ones.
RECENT_COSTS = 8


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
    ) -> None:
        # Tokens per second the engine runs (measured), for Retry-After and the expected wait.
        self._token_rate = token_rate
        # What one admitted token may hold (the memory bound's): bytes an input holds beyond
        # its tokens (an image's pixels) are priced at this many a token.
        self.bytes_per_token = bytes_per_token
        self.max_requests = max_requests
        self.max_tokens = max_tokens
        # The most one request may cost (more is a 413).
        self.max_request_tokens = min(max_request_tokens, max_tokens)
        # The most tokens a door estimate reserves: the most one request can hold.
        self.request_cap = min(self.max_request_tokens, largest_request_tokens)
        # Seconds a request may wait at the door for room (0: refused at once).
        self.max_wait = max_wait
        self._lock = threading.Lock()
        self.in_flight = 0
        self.admitted_tokens = 0
        self.peak_admitted_tokens = 0
        # Requests waiting at the door, in arrival order, and the sum of their estimates.
        self._waiters: deque[Waiter] = deque()
        self._waiting_tokens = 0
        self.waited = 0
        # What tokenized requests cost over what the door reserved for them (a moving average
        # from English JSON's token per four bytes), and the door estimates of the admitted
        # requests not tokenized yet.
        self._cost_per_estimate = cost_per_estimate
        # The last requests' cost over estimate: a run of requests far cheaper than their
        # bodies (images: base64 bytes, not tokens) is priced at once, not after the average
        # has crept down to them.
        self._recent_costs: deque[float] = deque(maxlen=RECENT_COSTS)
        self._unpriced = 0

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def retry_after(self, rate: float | None = None) -> str:
        """Seconds until what is admitted and waiting now has run, at the engine's measured
        token rate."""
        rate = self._token_rate() if rate is None else rate
        return _seconds(self._work(0) / rate if rate else 1.0)

    def _overloaded(self, why: str, retry_after: str | None = None) -> OverloadedError:
        return OverloadedError(
            f"the server is at capacity ({why}); retry after the time in Retry-After",
            headers={"retry-after": retry_after or self.retry_after()},
        )

    def admit(self, content_length: int | None) -> Ticket:
        """A ticket for a new request whose body has `content_length` bytes (None: chunked),
        now or never: OverloadedError if it does not fit (or others wait before it)."""
        estimate = self._estimate(content_length)
        with self._lock:
            ticket = self._admit_now(estimate, content_length)
            why = "" if ticket else self._refusal(estimate)
        if ticket is None:
            raise self._overloaded(why)  # its Retry-After reads the engines: not under the lock
        return ticket

    async def enter(self, content_length: int | None, max_wait: float | None = None) -> Ticket:
        """`admit`, except that a request that does not fit waits for room, in arrival order,
        up to `max_wait` seconds (default and most: the control's). Refused at once (429,
        Retry-After from the expected wait) when the requests waiting already number
        `max_requests` with those admitted, or when the engine's measured rate says that room
        will not come in time."""
        wait = self.max_wait if max_wait is None else min(max_wait, self.max_wait)
        estimate = self._estimate(content_length)
        with self._lock:
            ticket = self._admit_now(estimate, content_length)
            if ticket is not None:
                return ticket
            if wait <= 0 or self.in_flight + len(self._waiters) >= self.max_requests:
                why = self._refusal(estimate)
            else:
                why = ""
        if why:
            raise self._overloaded(why)
        rate = self._token_rate()  # outside the lock: it reads the engines
        loop = asyncio.get_running_loop()
        waiter = Waiter(estimate, content_length, time.monotonic(), loop, loop.create_future())
        retry_after = None
        with self._lock:
            # In line first: one that may pass the others gets in without a forecast.
            self._waiters.append(waiter)
            self._waiting_tokens += estimate
            granted = self._grant_waiters()
            if waiter.granted is None:
                expected = self._expected_wait(estimate, rate)
                if expected > wait:
                    self._forget(waiter)
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
            raise self._overloaded(why, retry_after)
        if waiter.granted is not None:  # it passed the requests waiting before it
            return waiter.granted
        waiter.timer = loop.call_later(wait, self._expire, waiter, wait)
        try:
            return await waiter.future
        except asyncio.CancelledError:
            waiter.timer.cancel()
            with self._lock:
                ticket = waiter.granted
                granted = []
                if waiter.waiting:
                    self._forget(waiter)
                    granted = self._grant_waiters()  # it may have held the others back
            wake(granted)
            if ticket is not None:
                self.release(ticket)
            raise

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
            if growth <= 0 or self.admitted_tokens + growth <= self.max_tokens:
                ticket.reserved = tokens
                self._hold(growth)
                if growth < 0:
                    granted = self._grant_waiters()
                why = ""
            else:
                why = self._room_message(tokens)
        if why:
            raise self._overloaded(why)
        wake(granted)

    def release(self, ticket: Ticket) -> None:
        """The request's response is sent (or it failed): its cost leaves the budget, and
        waiting requests that now fit are let in."""
        with self._lock:
            self.in_flight -= 1
            self.admitted_tokens -= ticket.reserved
            ticket.reserved = 0
            if not ticket.priced:
                ticket.priced = True
                self._unpriced -= ticket.door_estimate
            granted = self._grant_waiters()
        wake(granted)

    def _estimate(self, content_length: int | None) -> int:
        return min(content_length or 0, self.request_cap)

    def _fits(self, estimate: int) -> bool:
        return (
            self.in_flight < self.max_requests
            and self.admitted_tokens + estimate <= self.max_tokens
        )

    def _admit_now(self, estimate: int, content_length: int | None) -> Ticket | None:
        """Under the lock: a ticket if the request fits and nobody waits before it."""
        if self._waiters or not self._fits(estimate):
            return None
        return self._ticket(estimate, content_length, time.monotonic())

    def _ticket(self, estimate: int, content_length: int | None, arrived_at: float) -> Ticket:
        self.in_flight += 1
        self._hold(estimate)
        self._unpriced += estimate
        return Ticket(self, estimate, content_length or 0, estimate, admitted_at=arrived_at)

    def _grant_waiters(self) -> list[Waiter]:
        """Under the lock: admit the waiting requests that fit, in arrival order. A request
        that does not fit lets later, smaller ones pass it only MAX_PASSED_OVER times; then
        nobody passes it until it is in."""
        granted: list[Waiter] = []
        passed: list[Waiter] = []
        for waiter in list(self._waiters):
            if self.in_flight >= self.max_requests:
                break
            if not self._fits(waiter.estimate):
                if waiter.passed_over >= MAX_PASSED_OVER:
                    break
                passed.append(waiter)
                continue
            for earlier in passed:
                earlier.passed_over += 1
            self._forget(waiter)
            waiter.granted = self._ticket(waiter.estimate, waiter.content_length, waiter.arrived_at)
            granted.append(waiter)
            if any(earlier.passed_over >= MAX_PASSED_OVER for earlier in passed):
                break
        return granted

    def _expire(self, waiter: Waiter, waited: float) -> None:
        """On the event loop: `waiter` has waited as long as it may; refuse it unless it got
        in, and let in those it held back."""
        with self._lock:
            if not waiter.waiting:
                return
            self._forget(waiter)
            granted = self._grant_waiters()
            why = (
                f"this request needs {waiter.estimate} tokens and waited {waited:g} s "
                "(--max-admission-wait) without room"
            )
        wake(granted)
        if not waiter.future.done():
            waiter.future.set_exception(self._overloaded(why))

    def _forget(self, waiter: Waiter) -> None:
        """Under the lock: `waiter` waits no longer."""
        waiter.waiting = False
        self._waiters.remove(waiter)
        self._waiting_tokens -= waiter.estimate

    def _expected_wait(self, estimate: int, rate: float) -> float:
        """Under the lock: seconds until a request of `estimate` joining the queue would fit:
        the work admitted and waiting before it, at what tokenized requests really cost, past
        the room the bound leaves for it. 0 while the engine has no measured rate yet."""
        if not rate:
            return 0.0
        # Its own estimate is among the waiting (priced at the average): count it once, whole.
        work = self._work(estimate) - self._cost_ratio() * estimate
        return max(0.0, work - self.max_tokens) / rate

    def _work(self, estimate: int) -> float:
        """Under the lock: the tokens the engine runs before room for a new request of
        `estimate` is made: the admitted and waiting requests at what they will really cost
        (the ones not tokenized yet at what tokenized ones have cost over their estimates),
        and the new one at its estimate (what it will reserve)."""
        guessed = self._unpriced + self._waiting_tokens
        return self.admitted_tokens - self._unpriced + self._cost_ratio() * guessed + estimate

    def _cost_ratio(self) -> float:
        """Under the lock: what a request not tokenized yet will cost per token of its door
        estimate: the moving average, or less where every one of the last `RECENT_COSTS`
        requests cost less (the guess only decides whether a request waits or is refused at
        once; waiting is bounded by --max-admission-wait either way)."""
        recent = self._recent_costs
        if len(recent) < RECENT_COSTS:
            return self._cost_per_estimate
        return min(self._cost_per_estimate, max(recent))

    def priced(self, ticket: Ticket, cost: int) -> None:
        """`ticket`'s real cost is known: learn how costs relate to door estimates."""
        with self._lock:
            if ticket.priced:
                return
            ticket.priced = True
            self._unpriced -= ticket.door_estimate
            if ticket.door_estimate > 0:
                sample = min(cost / ticket.door_estimate, 1.0)
                self._cost_per_estimate += COST_AVERAGING * (sample - self._cost_per_estimate)
                self._recent_costs.append(sample)

    def _hold(self, tokens: int) -> None:
        self.admitted_tokens += tokens
        self.peak_admitted_tokens = max(self.peak_admitted_tokens, self.admitted_tokens)

    def _refusal(self, tokens: int) -> str:
        if self.in_flight + len(self._waiters) >= self.max_requests:
            return f"{self.in_flight} requests in flight and {len(self._waiters)} waiting"
        return self._room_message(tokens)

    def _room_message(self, tokens: int) -> str:
        return (
            f"this request needs {tokens} tokens and admitted requests hold "
            f"{self.admitted_tokens} of {self.max_tokens}"
        )


def _seconds(seconds: float) -> str:
    return str(max(1, math.ceil(seconds)))
