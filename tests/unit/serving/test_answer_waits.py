"""Waits for answers end early for the right reason: the grace period's end stops every one,
a caller that goes stops its own once it has waited WATCH_AFTER seconds, a time limit its own;
an answered wait leaves nothing behind."""

from __future__ import annotations

import asyncio

import pytest

from poolserve.serving.answer_waits import AnswerWaits

pytestmark = pytest.mark.anyio


async def test_the_grace_period_ending_stops_every_wait() -> None:
    loop = asyncio.get_running_loop()
    waits, grace = AnswerWaits(), loop.create_future()
    answers = [loop.create_future() for _ in range(3)]
    races = [waits.begin(answer, None, grace, None) for answer in answers]
    grace.set_result(None)
    await asyncio.wait(answers)  # the grace period's callback ends them
    assert all(answer.cancelled() for answer in answers)
    assert [race.why for race in races] == ["grace"] * 3
    for race in races:
        waits.end(race)
    assert len(waits) == 0
    # A wait that begins after the grace period ended stops at once.
    late = loop.create_future()
    assert waits.begin(late, None, grace, None).why == "grace" and late.cancelled()


async def test_a_caller_that_goes_stops_only_its_own_wait_once_watched() -> None:
    loop = asyncio.get_running_loop()
    waits, grace = AnswerWaits(), loop.create_future()
    watched, leave = asyncio.Event(), asyncio.Event()

    async def gone() -> None:
        watched.set()
        await leave.wait()

    staying, going = loop.create_future(), loop.create_future()
    stays = waits.begin(staying, None, grace, None)
    goes = waits.begin(going, None, grace, gone)
    await watched.wait()  # the sweep started watching the caller
    assert not going.done()
    leave.set()
    with pytest.raises(asyncio.CancelledError):
        await going
    assert goes.why == "gone"
    assert stays.why is None and not staying.done()
    waits.end(goes)
    staying.set_result(b"answer")
    waits.end(stays)
    assert len(waits) == 0


async def test_an_answer_in_time_is_never_watched_and_a_limit_stops_its_own_wait() -> None:
    loop = asyncio.get_running_loop()
    waits, grace = AnswerWaits(), loop.create_future()
    calls = 0

    async def gone() -> None:
        nonlocal calls
        calls += 1

    quick = loop.create_future()
    race = waits.begin(quick, None, grace, gone)
    quick.set_result(b"answer")
    waits.end(race)
    limited = loop.create_future()
    timed = waits.begin(limited, 0.01, grace, None)
    with pytest.raises(asyncio.CancelledError):
        await limited
    assert timed.why == "limit"
    waits.end(timed)
    assert calls == 0 and len(waits) == 0
