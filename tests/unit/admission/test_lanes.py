"""Priority lanes at the door: background requests hold at most their share of the bound, the
rest is kept for the default lane and above; a higher lane's waiting request goes in first; a body
that names a background priority moves its ticket there or gets 429; 429s are counted by lane."""

from __future__ import annotations

import asyncio

import pytest

from poolserve.admission.control import AdmissionControl
from poolserve.admission.tickets import Ticket
from poolserve.errors import OverloadedError

BOUND = 1000


def control(*, max_wait: float = 0.0, rate: float = 0.0, share: float = 0.75) -> AdmissionControl:
    return AdmissionControl(
        lambda: rate,
        bytes_per_token=2048,
        max_requests=100,
        max_tokens=BOUND,
        max_request_tokens=BOUND // 2,
        largest_request_tokens=5000,
        max_wait=max_wait,
        background_share=share,
    )


def test_background_requests_hold_at_most_their_share_and_the_rest_is_kept() -> None:
    admission = control()
    held = [admission.admit(300, priority=5), admission.admit(300, priority=10)]
    assert admission.admitted_background == 600 and admission.background_tokens == 750
    with pytest.raises(OverloadedError, match="background requests hold 600 of the 750"):
        admission.admit(200, priority=1)
    held.append(admission.admit(400))  # the default lane fits the room kept for it
    with pytest.raises(OverloadedError, match="admitted requests hold 1000 of 1000"):
        admission.admit(1, priority=-3)
    assert admission.refused_by_lane == {1: 1, -3: 1}
    for ticket in held:
        admission.release(ticket)
    assert admission.admitted_tokens == 0 and admission.admitted_background == 0


def test_a_body_naming_a_background_priority_moves_the_ticket_or_is_refused() -> None:
    admission = control()
    bulk = [admission.admit(400, priority=10), admission.admit(300, priority=10)]
    unknown = admission.admit(100)  # no x-priority: the default lane at the door
    with pytest.raises(OverloadedError, match="send the priority in the x-priority header"):
        admission.relane(unknown, 2)
    assert unknown.priority == 0 and admission.refused_by_lane == {2: 1}
    admission.release(bulk[0])
    admission.relane(unknown, 2)
    assert unknown.priority == 2 and admission.admitted_background == 300 + 100
    admission.relane(unknown, -1)  # back to a lane the share does not bound
    assert admission.admitted_background == 300
    admission.release(unknown)
    admission.release(bulk[1])
    assert admission.admitted_tokens == 0


def test_a_tokenized_background_request_grows_within_its_share_only() -> None:
    admission = control()
    ticket = admission.admit(400, priority=3)
    admission.admit(300, priority=3)
    with pytest.raises(OverloadedError, match="background"):
        ticket.tokenized([500], last=False)
    assert admission.admitted_background == 700


async def entering(admission: AdmissionControl, length: int, priority: int) -> asyncio.Task[Ticket]:
    started = asyncio.Event()

    async def enter() -> Ticket:
        started.set()
        return await admission.enter(length, priority=priority)

    task = asyncio.create_task(enter())
    await started.wait()
    return task


def test_a_higher_lane_waiting_at_the_door_goes_in_before_an_earlier_lower_one() -> None:
    async def scenario() -> None:
        admission = control(max_wait=30.0)
        first = admission.admit(500)
        second = admission.admit(450)
        background = await entering(admission, 400, 5)
        interactive = await entering(admission, 400, 0)
        assert admission.waiting_by_lane() == {0: 1, 5: 1}
        admission.release(first)  # room for one of them
        ticket = await interactive
        assert not background.done() and ticket.priority == 0
        admission.release(second)
        assert (await background).priority == 5
        assert admission.waiting_by_lane() == {}

    asyncio.run(scenario())


def test_a_new_request_passes_lower_lanes_waiting_but_not_its_own() -> None:
    async def scenario() -> None:
        admission = control(max_wait=30.0)
        held = [admission.admit(450), admission.admit(450)]
        waiting = await entering(admission, 400, 5)
        assert admission.admit(50).priority == 0  # fits, and only a lower lane waits
        with pytest.raises(OverloadedError):
            admission.admit(10, priority=5)  # its own lane waits before it
        admission.release(held[0])
        await waiting

    asyncio.run(scenario())


def test_the_forecast_of_a_wait_counts_only_the_lanes_that_go_in_first() -> None:
    """Nine requests of lane 0 wait; a lane -10 request goes in before them, so their tokens
    do not make its forecast wait too long for a 429 at once."""

    async def scenario() -> None:
        admission = control(max_wait=5.0, rate=100.0, share=1.0)
        held = [admission.admit(450), admission.admit(450)]
        waiting = [await entering(admission, 400, 0) for _ in range(9)]
        assert admission.waiting_by_lane() == {0: 9}
        urgent = await entering(admission, 400, -10)
        assert not urgent.done(), "refused for the lower lane's tokens"
        admission.release(held[0])
        assert (await urgent).priority == -10
        assert not any(task.done() for task in waiting)
        for task in waiting:
            task.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)

    asyncio.run(scenario())
