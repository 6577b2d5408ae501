"""The Batch API's line gate: up to `most` lines at once while no interactive work is about;
while it is (and for a moment after), at most `few` at once, started at most `rate` a second."""

from __future__ import annotations

import asyncio
import time

import pytest

from poolserve.server.batch_api.line_gate import LineGate

pytestmark = pytest.mark.anyio
WAIT = 5


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def asking(gate: LineGate, count: int) -> list[asyncio.Task[None]]:
    """`count` lines asking to start, in order (each task ends once its line may run)."""
    return [asyncio.create_task(gate.enter()) for _ in range(count)]


async def test_alone_a_batch_runs_up_to_most_lines_at_once() -> None:
    gate = LineGate(most=3, few=1, rate=1000.0, crowded=lambda: False)
    tasks = asking(gate, 4)
    await asyncio.wait_for(asyncio.gather(*tasks[:3]), WAIT)
    # Not crowded, no timer is set: only a line's end lets the fourth in.
    assert gate.running == 3 and not tasks[3].done() and gate._timer is None
    await gate.leave()
    await asyncio.wait_for(tasks[3], WAIT)
    assert gate.running == 3


async def test_beside_interactive_work_a_batch_runs_few_lines_and_at_a_rate() -> None:
    interactive = [True]
    gate = LineGate(most=8, few=2, rate=20.0, crowded=lambda: interactive[0])
    started = time.monotonic()
    first = asking(gate, 3)
    await asyncio.wait_for(asyncio.gather(*first[:2]), WAIT)
    # The second started on the gate's timer, a 1/rate after the first.
    assert time.monotonic() - started >= 0.05
    # `few` running: the third waits for a line to end (no timer is set for it).
    assert gate.running == 2 and not first[2].done() and gate._timer is None
    await gate.leave()
    await asyncio.wait_for(first[2], WAIT)
    # Once interactive work is gone (and the gate's memory of it), it opens up again.
    interactive[0] = False
    gate._crowded_at = -float("inf")  # the memory elapsed
    await asyncio.wait_for(asyncio.gather(*asking(gate, 5)), WAIT)
    assert gate.running == 7
