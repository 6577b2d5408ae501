"""How many batch lines run, all batches together: up to `most` at once while nothing else asks
for the server; while interactive requests (priority 0 and above) are about (`crowded`), at
most `few` at once and `rate` a second.

A line costs the event loop what a request does (its way through the front end, its answer),
and the loop is shared with the interactive requests: the express runner keeps the model's work
apart, but not that. At 900 one-sentence lines a second the loop was never idle, and a query
waited for it before it was even read (its p99 five times idle, the server's own time for it
unchanged). Fewer lines at once did not lower the rate (a one-sentence line took 2 ms); a rate
did. So the batch gives way by running lines more slowly, and takes the machine back as soon
as the interactive requests are gone. The gate is looked at when a line ends, and at the time
the next line may start (a timer), never in a loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

# Seconds the gate stays narrow after it last saw interactive work (the next request of a
# client at work is likely near).
MEMORY = 1.0


class LineGate:
    def __init__(self, most: int, few: int, rate: float, crowded: Callable[[], bool]) -> None:
        self._most = most
        self._few = few
        self._interval = 1.0 / rate
        self._crowded = crowded
        self._changed = asyncio.Condition()
        self._timer: asyncio.TimerHandle | None = None
        self._notifying: asyncio.Task[None] | None = None
        self._last_start = self._crowded_at = -float("inf")
        self.running = 0

    def _room(self) -> bool:
        now = time.monotonic()
        if self._crowded():
            self._crowded_at = now
        if now - self._crowded_at > MEMORY:
            return self.running < self._most
        if self.running >= self._few:
            return False
        wait = self._last_start + self._interval - now
        if wait <= 0:
            return True
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(wait, self._tick)
        return False

    def _tick(self) -> None:
        self._timer = None
        self._notifying = asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def enter(self) -> None:
        async with self._changed:
            await self._changed.wait_for(self._room)
            self.running += 1
            self._last_start = time.monotonic()

    async def leave(self) -> None:
        async with self._changed:
            self.running -= 1
            self._changed.notify_all()
