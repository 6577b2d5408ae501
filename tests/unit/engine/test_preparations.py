"""Small requests' preparations waiting for a runner (engine/preparations.py): taken higher
lanes first, all of them or (for the express runner) those of the default lane and above only,
their inputs counted by lane as they wait."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

from poolserve.engine.preparations import Preparation, Preparations, WakeEachTurn, run_all


def noted(name: str, ran: list[str], texts: tuple[str, ...] = ()) -> Preparation:
    return Preparation(ran.append, (name,), lambda: None, texts)


def test_the_express_runner_takes_the_default_lane_and_above_and_leaves_the_rest() -> None:
    waiting, ran = Preparations(), []
    for priority, inputs, name in [(5, 3, "bulk"), (0, 1, "query"), (-2, 2, "urgent")]:
        waiting.add(priority, inputs, noted(name, ran))
    waiting.add(0, 1, noted("second query", ran))
    assert waiting.has_foreground()
    run_all(waiting.take(foreground_only=True))
    assert ran == ["urgent", "query", "second query"]
    assert dict(waiting.inputs) == {5: 3} and waiting.total_inputs == 3
    assert not waiting.has_foreground() and waiting
    assert waiting.take(foreground_only=True) == []
    run_all(waiting.take())
    assert ran[-1] == "bulk" and not waiting and waiting.total_inputs == 0


def test_the_preparations_run_at_once_have_their_texts_tokenized_in_one_call() -> None:
    """Every text of the preparations run at once goes to one tokenizer call, made before the
    first runs and ended after the last; preparations without texts call nothing."""
    ran: list[str] = []
    calls: list[list[str]] = []

    @contextmanager
    def tokenizing(texts: list[str]) -> Iterator[None]:
        calls.append(texts)
        ran.append("tokenized")
        yield
        ran.append("done")

    run_all(
        [noted("a", ran, ("one", "two")), noted("b", ran), noted("c", ran, ("three",))],
        tokenizing,
    )
    assert calls == [["one", "two", "three"]]
    assert ran == ["tokenized", "a", "b", "c", "done"]
    run_all([noted("d", ran)], tokenizing)
    assert calls == [["one", "two", "three"]] and ran[-1] == "d"


def test_the_requests_of_one_turn_of_an_event_loop_wake_a_runner_once() -> None:
    """`WakeEachTurn`: however many requests a turn of the loop queues, the runner is woken
    once, after them (callbacks run in the order they were scheduled), and again for the
    next turn's."""
    wakes: list[int] = []
    waker = WakeEachTurn(lambda: wakes.append(len(wakes)))

    async def turns() -> None:
        loop = asyncio.get_running_loop()
        for _ in range(3):
            waker.soon(loop)
        assert wakes == []  # not before the turn is done
        turn_done = loop.create_future()
        loop.call_soon(turn_done.set_result, None)
        await turn_done
        assert wakes == [0]
        waker.soon(loop)
        turn_done = loop.create_future()
        loop.call_soon(turn_done.set_result, None)
        await turn_done
        assert wakes == [0, 1]

    asyncio.run(turns())


def test_a_closed_loop_wakes_the_runner_at_once() -> None:
    wakes: list[str] = []
    loop = asyncio.new_event_loop()
    loop.close()
    WakeEachTurn(lambda: wakes.append("woken")).soon(loop)
    assert wakes == ["woken"]
