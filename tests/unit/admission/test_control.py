"""Admission by cost: what a ticket reserves at the door, as its body streams in and as it is
tokenized, and when it is refused with 429 or 413."""

from __future__ import annotations

import asyncio
import math
import threading

import pytest

from poolserve.admission.control import AdmissionControl
from poolserve.admission.tickets import BODY_BYTES_PER_TOKEN, MAX_PASSED_OVER, Ticket
from poolserve.config import MIN_INPUT_TOKENS
from poolserve.errors import OverloadedError, PayloadTooLargeError

BOUND = 1000
# What one admitted token may hold (an embedding model of 384 floats: 128 + 5 × 384 bytes).
BYTES_PER_TOKEN = 2048


def control(
    max_requests: int = 100, rate: float = 250.0, max_request_tokens: int = BOUND
) -> AdmissionControl:
    return AdmissionControl(
        lambda: rate,
        bytes_per_token=BYTES_PER_TOKEN,
        max_requests=max_requests,
        max_tokens=BOUND,
        max_request_tokens=max_request_tokens,
        largest_request_tokens=5000,
    )


def test_the_door_reserves_the_content_length_and_refuses_what_does_not_fit() -> None:
    admission = control()
    first = admission.admit(600)
    assert first.reserved == 600 and admission.admitted_tokens == 600
    first.tokenized([600], last=True)  # its real cost: as much
    with pytest.raises(OverloadedError) as refused:
        admission.admit(401)
    # Retry-After: what is admitted, at the measured rate (600 tokens at 250/s: 3 s).
    assert refused.value.headers == {"retry-after": "3"}
    assert "needs 401 tokens" in refused.value.message
    second = admission.admit(400)  # exactly fills the bound
    assert admission.admitted_tokens == BOUND
    admission.release(first)
    admission.release(second)
    assert admission.admitted_tokens == 0 and admission.in_flight == 0
    assert admission.peak_admitted_tokens == BOUND


def test_a_body_larger_than_the_bound_reserves_all_of_it_and_waits_for_an_empty_server() -> None:
    admission = control()
    small = admission.admit(10)
    with pytest.raises(OverloadedError):
        admission.admit(50_000)
    admission.release(small)
    large = admission.admit(50_000)
    assert large.reserved == BOUND


def test_requests_in_flight_are_bounded_too() -> None:
    admission = control(max_requests=2)
    admission.admit(1)
    admission.admit(1)
    with pytest.raises(OverloadedError) as refused:
        admission.admit(1)
    assert "2 requests in flight" in refused.value.message


def test_a_chunked_body_reserves_what_has_arrived() -> None:
    admission = control()
    other = admission.admit(700)
    ticket = admission.admit(None)
    assert ticket.reserved == 0
    ticket.body_received(200)
    assert admission.admitted_tokens == 900
    with pytest.raises(OverloadedError):
        ticket.body_received(301)
    admission.release(other)
    ticket.body_received(301)
    assert admission.admitted_tokens == 301


def test_once_tokenized_a_request_costs_its_tokens_and_gives_back_the_rest() -> None:
    admission = control()
    ticket = admission.admit(800)
    ticket.tokenized([10, 2, 30], last=False)  # 2 counts as MIN_INPUT_TOKENS
    assert ticket.reserved == 800  # the estimate still covers it
    ticket.tokenized([20], last=True)
    assert ticket.tokenized_cost == 10 + MIN_INPUT_TOKENS + 30 + 20
    # At least one token per BODY_BYTES_PER_TOKEN bytes of body (100 here) stays held.
    assert ticket.reserved == max(64, math.ceil(800 / BODY_BYTES_PER_TOKEN)) == 100
    assert admission.admitted_tokens == 100
    assert admission.admit(900).reserved == 900


def test_a_request_that_costs_more_than_estimated_grows_or_is_refused() -> None:
    admission = control()
    pairs = admission.admit(100)  # a rerank: the query counts once per document
    pairs.tokenized([150] * 2, last=False)
    assert pairs.reserved == 300
    other = admission.admit(600)
    with pytest.raises(OverloadedError):
        pairs.tokenized([150], last=True)  # 450 would take the sum to 1050
    assert pairs.reserved == 300 and admission.admitted_tokens == 900
    admission.release(other)
    admission.release(pairs)
    assert admission.admitted_tokens == 0


def test_a_request_that_alone_costs_more_than_the_bound_is_413() -> None:
    admission = control()
    ticket = admission.admit(500)
    with pytest.raises(PayloadTooLargeError) as refused:
        ticket.tokenized([600, 600], last=False)
    assert "costs 1200 tokens" in refused.value.message
    assert "split it" in refused.value.message
    with pytest.raises(PayloadTooLargeError):
        admission.admit(10).tokenized([1001], last=True)


def test_one_request_may_cost_at_most_max_request_tokens() -> None:
    """With room to spare in the bound, a request past its own cap is still a 413; its door
    estimate is capped there too, so a large body never reserves more than it may cost."""
    admission = control(max_request_tokens=400)
    assert admission.admit(900).reserved == 400
    ticket = admission.admit(100)
    with pytest.raises(PayloadTooLargeError, match=r"costs 401 tokens.*\(400, --max-request"):
        ticket.tokenized([401], last=True)
    fits = admission.admit(100)
    fits.tokenized([400], last=True)
    assert fits.reserved == 400


def test_a_refusal_reads_the_engines_rate_outside_the_admission_lock() -> None:
    """Retry-After asks the engines for their rate; the door's lock is not held meanwhile (the
    next request's admission would wait on it)."""
    held: list[bool] = []

    def rate() -> float:
        held.append(admission._lock.locked())
        return 250.0

    admission = AdmissionControl(
        rate,
        bytes_per_token=BYTES_PER_TOKEN,
        max_requests=1,
        max_tokens=BOUND,
        max_request_tokens=BOUND,
        largest_request_tokens=5000,
    )
    first = admission.admit(400)
    with pytest.raises(OverloadedError):
        admission.admit(10)  # one request in flight is the most
    admission.max_requests = 2
    with pytest.raises(OverloadedError):
        admission.admit(601)  # tokens
    second = admission.admit(100)
    with pytest.raises(OverloadedError):
        admission.resize(second, 700)  # a tokenized request that grew past the bound
    assert held == [False, False, False]
    admission.release(first)
    admission.release(second)


def test_the_engines_rate_without_a_snapshot_is_the_snapshots() -> None:
    from poolserve.engine.stats import EngineStats

    stats = EngineStats(runner_count=2)
    assert stats.tokens_per_second() == stats.snapshot().tokens_per_second == 0.0
    stats.batch_started()
    stats.batch_ended(0, items=4, tokens=80, padded_tokens=100, seconds=0.5)
    stats.batch_started()
    stats.batch_ended(1, items=2, tokens=40, padded_tokens=60, seconds=0.2)
    assert stats.tokens_per_second() == stats.snapshot().tokens_per_second == 200.0 + 300.0
    # A batch of images counts the bytes it holds, not its tokens, in a rate of its own.
    stats.batch_started()
    stats.batch_ended(1, items=2, tokens=100, padded_tokens=100, seconds=0.3, held_bytes=5000)
    assert stats.work_rate() == (200.0 + 60 / 0.5, 5000 / 0.5)
    assert stats.snapshot().held_bytes_per_second == 5000 / 0.5
    stats.runner_died(0)
    stats.runner_died(1)
    assert stats.tokens_per_second() == stats.snapshot().tokens_per_second == 160 / 1.0


def test_what_an_input_holds_beyond_its_tokens_is_priced_at_the_bounds_bytes_per_token() -> None:
    """An image's pixels hold far more than its tokens' share: it costs its bytes at what one
    admitted token may hold, so the memory bound holds for images too; text costs its tokens."""
    admission = control()
    ticket = admission.admit(100)
    ticket.tokenized([50, 3, 7], held_bytes=[BYTES_PER_TOKEN * 100 + 1, 0, 10], last=True)
    assert ticket.tokenized_cost == 101 + MIN_INPUT_TOKENS + 7


# -- waiting at the door -------------------------------------------------------------------------


def waiting_control(
    *,
    rate: float = 0.0,
    max_wait: float = 30.0,
    max_requests: int = 100,
    cost_per_estimate: float = 0.25,
) -> AdmissionControl:
    return AdmissionControl(
        lambda: rate,
        bytes_per_token=BYTES_PER_TOKEN,
        max_requests=max_requests,
        max_tokens=BOUND,
        max_request_tokens=BOUND // 2,
        largest_request_tokens=5000,
        max_wait=max_wait,
        cost_per_estimate=cost_per_estimate,
    )


async def entering(
    admission: AdmissionControl, length: int, *, max_wait: float | None = None
) -> asyncio.Task[Ticket]:
    """`admission.enter(length)` started, and run until it is admitted or waiting: the event
    is set as the task starts, and the task runs on, without yielding, to its first wait."""
    started = asyncio.Event()

    async def enter() -> Ticket:
        started.set()
        return await admission.enter(length, max_wait)

    task = asyncio.create_task(enter())
    await started.wait()
    return task


def test_a_request_that_does_not_fit_waits_and_gets_in_when_room_is_made() -> None:
    async def scenario() -> None:
        admission = waiting_control()
        first = await admission.enter(500)
        second = await admission.enter(450)
        third = await entering(admission, 300)
        fourth = await entering(admission, 40)  # fits: it passes the waiting one
        assert fourth.done() and not third.done() and admission.waiting == 1
        assert admission.admitted_tokens == 990
        first.tokenized([40], last=True)  # tokenized: its cost shrinks to ~its real tokens
        ticket = await third
        # One waited; the other passed it on arrival.
        assert ticket.reserved == 300 and admission.waiting == 0 and admission.waited == 1
        for each in (first, second, ticket, await fourth):
            admission.release(each)
        assert admission.admitted_tokens == 0 and admission.in_flight == 0

    asyncio.run(scenario())


def test_room_made_on_another_thread_wakes_the_waiting_request() -> None:
    """The CPU pool tokenizes: a ticket that shrinks there lets the waiting request in, on the
    event loop."""

    async def scenario() -> None:
        admission = waiting_control()
        first = await admission.enter(500)
        second = await admission.enter(500)
        waiting = await entering(admission, 200)
        worker = threading.Thread(target=first.tokenized, args=([30],), kwargs={"last": True})
        worker.start()
        assert (await waiting).reserved == 200
        worker.join()
        assert admission.admitted_tokens == second.reserved + 200 + first.reserved

    asyncio.run(scenario())


def test_a_request_that_waits_too_long_is_refused_and_leaves_nothing_behind() -> None:
    async def scenario() -> None:
        admission = waiting_control(max_wait=0.01)
        held = await admission.enter(500)
        await admission.enter(500)
        with pytest.raises(OverloadedError) as refused:
            await admission.enter(100)
        assert "waited 0.01 s" in refused.value.message
        assert refused.value.headers["retry-after"] == "1"  # no rate measured yet
        assert admission.waiting == 0 and admission.in_flight == 2
        admission.release(held)
        assert (await admission.enter(100)).reserved == 100

    asyncio.run(scenario())


def test_the_expected_wait_refuses_at_once_with_a_retry_after_from_it() -> None:
    """At 100 tokens/s, the work admitted and waiting before a request decides: what cannot
    fit within --max-admission-wait is refused without waiting, told how long to wait."""

    async def scenario() -> None:
        # Requests that cost what the door reserved for them.
        admission = waiting_control(rate=100.0, max_wait=5.0, cost_per_estimate=1.0)
        for _ in range(2):
            (await admission.enter(500)).tokenized([500], last=True)
        # 1000 admitted + 300 of its own - 1000 of room: 300 tokens to run, 3 s. It waits.
        waiting = await entering(admission, 300)
        assert admission.waiting == 1
        # 1000 + 300 waiting + 400 - 1000: 7 s, more than 5.
        with pytest.raises(OverloadedError) as refused:
            await admission.enter(400)
        assert refused.value.headers["retry-after"] == "7"
        assert "about 7 s at the measured 100 tokens/s" in refused.value.message
        assert admission.waiting == 1
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert admission.waiting == 0 and admission.in_flight == 2

    asyncio.run(scenario())


def test_the_expected_wait_prices_waiting_requests_at_what_tokenized_ones_cost() -> None:
    """Door estimates count bytes; the expected wait counts what requests not tokenized yet
    will cost, learnt from those that were: what one byte per token would refuse waits."""

    async def scenario(learn: bool) -> None:
        admission = waiting_control(rate=100.0, max_wait=5.0, cost_per_estimate=1.0)
        for _ in range(40 if learn else 0):  # JSON of English: about a token per four bytes
            ticket = await admission.enter(400)
            ticket.tokenized([100], last=True)
            admission.release(ticket)
        held = [await admission.enter(500), await admission.enter(500)]
        # Not tokenized yet: 1000 bytes held, 400 waiting and 500 of its own: at a token per
        # byte 9 s of work; at what they have cost (about 0.35 a byte) none.
        waiting = await entering(admission, 400)
        if not learn:
            with pytest.raises(OverloadedError, match="about 9 s"):
                await admission.enter(500)
            waiting.cancel()
            return
        last = await entering(admission, 500)
        assert admission.waiting == 2
        for ticket in held:
            admission.release(ticket)
        assert (await waiting).reserved == 400 and (await last).reserved == 500

    asyncio.run(scenario(learn=False))
    asyncio.run(scenario(learn=True))


def test_a_run_of_requests_far_cheaper_than_their_bodies_prices_the_next_at_once() -> None:
    """Image requests: base64 bytes at the door, a few tokens once prepared. After a run of
    them (RECENT_COSTS), waiting requests are priced at the run's ratio, not at the average,
    which creeps down by COST_AVERAGING a request."""
    from poolserve.admission.pricing import RECENT_COSTS

    async def scenario(run: int) -> None:
        admission = waiting_control(rate=100.0, max_wait=5.0, cost_per_estimate=1.0)
        for _ in range(run):
            ticket = await admission.enter(400)
            ticket.tokenized([4], last=True)  # 1 % of its estimate
            admission.release(ticket)
        held = [await admission.enter(500), await admission.enter(500)]
        waiting = await entering(admission, 400)
        if run < RECENT_COSTS:
            # The average after a few is still far above 1 %: 1000 + 400 + 500 - 1000 at
            # about that ratio is more than 5 s.
            with pytest.raises(OverloadedError, match="about"):
                await admission.enter(500)
        else:
            last = await entering(admission, 500)
            assert admission.waiting == 2
            for ticket in held:
                admission.release(ticket)
            assert (await waiting).reserved == 400 and (await last).reserved == 500
            return
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting

    asyncio.run(scenario(RECENT_COSTS - 1))
    asyncio.run(scenario(RECENT_COSTS))


def test_waiting_requests_count_against_max_concurrent_requests() -> None:
    async def scenario() -> None:
        admission = waiting_control(max_requests=3)
        await admission.enter(500)
        await admission.enter(500)
        waiting = await entering(admission, 100)
        with pytest.raises(OverloadedError, match="2 requests in flight and 1 waiting"):
            await admission.enter(1)
        waiting.cancel()

    asyncio.run(scenario())


def test_a_large_waiting_request_is_passed_over_a_bounded_number_of_times() -> None:
    """Small requests fit in room a large one waits for; they pass it MAX_PASSED_OVER times,
    then wait behind it until it is in."""

    async def scenario() -> None:
        admission = waiting_control()
        # 700 held: a 400-token request waits; small ones arrive after it.
        held = await admission.enter(500)
        other = await admission.enter(200)
        large = await entering(admission, 400)
        small = [await entering(admission, 10) for _ in range(MAX_PASSED_OVER + 2)]
        passed = [task for task in small if task.done()]
        assert len(passed) == MAX_PASSED_OVER and not large.done()
        admission.release(other)  # 500 + 80 held: the large one fits, then the rest
        assert (await large).reserved == 400
        for task in small:
            assert (await task).reserved == 10
        admission.release(held)

    asyncio.run(scenario())


def test_a_waiting_request_that_gives_up_lets_those_it_held_back_in() -> None:
    """Passed over MAX_PASSED_OVER times, a waiting request holds the later ones back; when it
    leaves (its wait is over), they get in at once if they fit."""

    async def scenario() -> None:
        admission = waiting_control()
        held = await admission.enter(500)
        await admission.enter(200)
        large = await entering(admission, 400, max_wait=0.05)
        small = [await entering(admission, 10) for _ in range(MAX_PASSED_OVER + 2)]
        assert sum(task.done() for task in small) == MAX_PASSED_OVER
        with pytest.raises(OverloadedError, match=r"waited 0\.05 s"):
            await large
        for task in small:
            assert (await task).reserved == 10
        assert admission.waiting == 0
        admission.release(held)

    asyncio.run(scenario())


def test_a_request_that_fits_is_let_in_whatever_the_forecast_for_the_queue() -> None:
    """A small request that fits now and may pass the waiting ones gets in, even when the work
    waiting is more than it may wait for."""

    async def scenario() -> None:
        admission = waiting_control(rate=100.0, max_wait=10.0, cost_per_estimate=1.0)
        held = await admission.enter(450)
        held.tokenized([450], last=True)
        other = await admission.enter(450)
        other.tokenized([450], last=True)
        waiting = await entering(admission, 450)  # 450 tokens of work before it: 4.5 s
        # 650 tokens before a newcomer: 6.5 s, more than the 2 s it may wait, yet it fits.
        small = await admission.enter(50, max_wait=2.0)
        assert small.reserved == 50 and not waiting.done()
        waiting.cancel()

    asyncio.run(scenario())
