"""What may end a request's wait for its answer before the answer comes, kept for every waiting
request of the event loop at once.

Three things may: its time limit, the end of the shutdown's grace period, and its caller going.
Only the limit is a timer of the request's own (most requests have none: `--request-timeout`
is off by default). The grace period's end is one callback for all of them, and the callers of
the requests still waiting WATCH_AFTER seconds after they reached the engine are watched from
one sweep that runs while any request waits: a request answered sooner (almost all) costs the
loop a dict entry, not two timers and a callback on a future every request shares (whose
removal scans the callbacks of every request in flight).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

# A request still waiting this long after it reached the engine has its caller watched (HTTP:
# a task that waits for the disconnect), swept for every WATCH_AFTER seconds.
WATCH_AFTER = 0.25


class Race:
    """One request's wait: its answer's future, cancelled by the first thing that ends the wait
    (`why`: "limit", "grace" or "gone")."""

    __slots__ = ("_answer", "_gone", "_limit", "_watcher", "since", "why")

    def __init__(
        self,
        answer: asyncio.Future[Any],
        wait: float | None,
        gone: Callable[[], Awaitable[Any]] | None,
    ) -> None:
        loop = answer.get_loop()
        self._answer = answer
        self._gone = gone
        self._watcher: asyncio.Future[Any] | None = None
        self._limit = loop.call_later(wait, self.stop, "limit") if wait is not None else None
        self.since = loop.time()
        self.why: str | None = None

    def stop(self, reason: str) -> None:
        if not self._answer.done():
            self.why = reason
            self._answer.cancel()

    def watch(self) -> None:
        """Start watching for the caller going (once; a wait with no caller to watch: never)."""
        if self._gone is None or self._watcher is not None:
            return
        self._watcher = asyncio.ensure_future(self._gone(), loop=self._answer.get_loop())
        self._watcher.add_done_callback(
            lambda task: None if task.cancelled() else self.stop("gone")
        )

    def close(self) -> None:
        if self._limit is not None:
            self._limit.cancel()
        if self._watcher is not None:
            self._watcher.cancel()


class AnswerWaits:
    """Every request of one event loop waiting for its answer (`begin` when it starts waiting,
    `end` when it stops)."""

    def __init__(self) -> None:
        self._races: dict[Race, None] = {}  # in the order they began
        self._sweep: asyncio.TimerHandle | None = None
        self._sweep_loop: asyncio.AbstractEventLoop | None = None
        self._grace: asyncio.Future[None] | None = None

    def begin(
        self,
        answer: asyncio.Future[Any],
        wait: float | None,
        grace_over: asyncio.Future[None],
        gone: Callable[[], Awaitable[Any]] | None,
    ) -> Race:
        """The wait for `answer`: cancelled once `wait` seconds pass, `grace_over` completes,
        or (after WATCH_AFTER seconds) `gone()` returns."""
        race = Race(answer, wait, gone)
        if grace_over.done():
            race.stop("grace")
        elif grace_over is not self._grace:
            self._grace = grace_over
            grace_over.add_done_callback(self._grace_ended)
        self._races[race] = None
        loop = answer.get_loop()
        if gone is not None and (self._sweep is None or self._sweep_loop is not loop):
            self._sweep_loop = loop  # (a test's app may outlive one loop and serve on another)
            self._sweep = loop.call_later(WATCH_AFTER, self._watch_late, loop)
        return race

    def end(self, race: Race) -> None:
        race.close()
        self._races.pop(race, None)

    def __len__(self) -> int:
        return len(self._races)

    def _grace_ended(self, over: asyncio.Future[None]) -> None:
        if over is self._grace:
            for race in list(self._races):
                race.stop("grace")

    def _watch_late(self, loop: asyncio.AbstractEventLoop) -> None:
        """Watch the callers of the requests waiting for WATCH_AFTER seconds or more; sweep
        again while any request waits."""
        self._sweep = None
        if not self._races:
            return
        started_before = loop.time() - WATCH_AFTER
        for race in self._races:
            if race.since > started_before:
                break  # the rest began later
            race.watch()
        self._sweep = loop.call_later(WATCH_AFTER, self._watch_late, loop)
