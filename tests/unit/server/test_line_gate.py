"""The Batch API's line gate: up to `most` lines at once while no interactive work is about;
while it is (and for a moment after), at most `few` at once, started at most `rate` a second."""

from __future__ import annotations

import asyncio

import pytest

from poolserve.server.batch_api.line_gate import LineGate

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def entered(gate: LineGate, count: int) -> list[asyncio.Task[None]]:
    """`count` lines asking to start; those the gate lets in have started when this returns."""
    tasks = [asyncio.create_task(gate.enter()) for _ in range(count)]
    for _ in range(count + 1):  # each a turn of the loop to take the condition
        await asyncio.sleep(0)
    return tasks


async def test_alone_a_batch_runs_up_to_most_lines_at_once() -> None:
    gate = LineGate(most=3, few=1, rate=1000.0, crowded=lambda: False)
    tasks = await entered(gate, 4)
    assert gate.running == 3 and sum(task.done() for task in tasks) == 3
    await gate.leave()
    await asyncio.wait_for(asyncio.gather(*tasks), 5)
    assert gate.running == 3


async def test_beside_interactive_work_a_batch_runs_few_lines_and_at_a_rate() -> None:
    interactive = [True]
    gate = LineGate(most=8, few=2, rate=50.0, crowded=lambda: interactive[0])
    first = await entered(gate, 3)
    # One line in: the next may start only 1/rate seconds after it, on the gate's timer.
    assert gate.running == 1
    await asyncio.wait_for(asyncio.gather(*first[:2]), 5)
    # `few` running: the third waits for a line to end (no timer is set for it).
    for _ in range(3):
        await asyncio.sleep(0)
    assert gate.running == 2 and not first[2].done() and gate._timer is None
    await gate.leave()
    await asyncio.wait_for(first[2], 5)
    # Once interactive work is gone (and the gate's memory of it), it opens up again.
    interactive[0] = False
    gate._crowded_at = -float("inf")  # the memory elapsed
    more = await entered(gate, 5)
    assert sum(task.done() for task in more) == 5 and gate.running == 7
