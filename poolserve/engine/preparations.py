"""Small requests' preparations, waiting for a runner to run them before its next batch.

Under load a runner is awake and comes back for work anyway: a small request it tokenizes and
submits itself reaches the engine without waking any thread (waking a sleeping one costs a
system call on both threads, about 12 µs on the waker on a 2-core VM, and a turn at the GIL),
and every request prepared meanwhile is in the next batch. An idle runner is woken for one:
it prepares the request and runs it, one wake-up where the CPU pool would have taken two.
Larger requests, and images, are prepared in the CPU pool (engine/pipeline.py says which).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import weakref
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import NamedTuple

from poolserve.config.priorities import is_background

logger = logging.getLogger("poolserve")

# A small request's preparation wakes an idle runner unless a busy one comes back for it
# within BACK_SOON_SECONDS (`Preparations.wake_for`), or until the waiting preparations hold
# SHARED_PREPARATION_INPUTS inputs. Measured on a static model, whose batches take well under a
# millisecond and whose work is its tokenizing: one-sentence requests at c=64 ran 13 % faster
# on one runner than on two each woken for them, 32-sentence ones 12 % slower.
BACK_SOON_SECONDS = 0.001
SHARED_PREPARATION_INPUTS = 16


class Preparation(NamedTuple):
    """What to call, its arguments, and what to call instead if it never runs."""

    run: Callable[..., None]
    args: tuple[object, ...]
    dropped: Callable[[], None]
    # The texts it tokenizes, as far as its caller knows them: `run_all` tokenizes those of
    # every preparation it runs in one call first.
    texts: Sequence[str] = ()


# Tokenizes texts in one call, for the preparations run within it to find their tokens made.
Tokenizing = Callable[[list[str]], AbstractContextManager[object]]


class WakeEachTurn:
    """Wakes a runner for the preparations an event loop queues once a turn of the loop, not
    once a request: the requests read together from the sockets are all queued before a runner
    is woken, and it takes them all (one tokenizer call, one batch). A wake-up is a system call
    on the loop's thread and on the runner's: with one-sentence requests of a static model at
    c=64 (benchmarks.app_loop_cost), 60 % of them woke a runner. Woken once a turn instead, the
    server ran 14 % more of them (benchmarks.tree_ab, 4 rounds)."""

    def __init__(self, wake: Callable[[], None]) -> None:
        self._wake = wake
        # The loops with a wake-up to come (each read and written on its own loop's thread; a
        # loop closed before its callback ran is not kept alive here).
        self._scheduled: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()

    def soon(self, loop: asyncio.AbstractEventLoop) -> None:
        """On `loop`'s thread: wake a runner once the loop's current turn is done."""
        if loop in self._scheduled:
            return
        try:
            loop.call_soon(self._run, loop)
        except RuntimeError:  # the loop is closed: at once
            self._wake()
            return
        self._scheduled.add(loop)

    def _run(self, loop: asyncio.AbstractEventLoop) -> None:
        self._scheduled.discard(loop)
        self._wake()


class Preparations:
    """The preparations waiting, with their lanes and their requests' inputs (the scheduler's
    lock guards them; its queue depth counts their inputs as waiting)."""

    def __init__(self, tokenizing: Tokenizing | None = None) -> None:
        self.tokenizing = tokenizing
        self._waiting: list[tuple[int, int, Preparation]] = []
        # Their inputs by lane, and in all (an int: read without the lock).
        self.inputs: Counter[int] = Counter()
        self.total_inputs = 0
        # The runners running some now, and whether this thread is one of them.
        self._runners = 0
        self._local = threading.local()

    @contextmanager
    def running(self) -> Iterator[None]:
        """While this thread (a runner) runs preparations (enter and leave under the lock)."""
        self._runners += 1
        self._local.running = True
        try:
            yield
        finally:
            self._local.running = False
            self._runners -= 1

    def run_unlocked(
        self, lock: threading.Condition, preparations: list[Preparation], *, counted: bool = True
    ) -> None:
        """Run `preparations` with `lock` (the scheduler's, held) let go meanwhile: they submit.
        `counted`: as a runner preparing (the express runner's count for no one: it takes only
        the default lane and above next)."""
        with self.running() if counted else nullcontext():
            lock.release()
            try:
                run_all(preparations, self.tokenizing)
            finally:
                lock.acquire()

    def on_this_thread(self) -> bool:
        """Whether this thread is running preparations (the items they submit, it batches)."""
        return bool(getattr(self._local, "running", False))

    def wake_for(self, ends_in: float) -> bool:
        """Whether a preparation just added should wake an idle runner, the busy ones' batches
        ending in `ends_in` seconds (0: none runs): not while a busy runner comes back for it
        soon enough (a wake-up costs both threads a turn at the GIL): one is preparing (it takes
        it next), or its batch ends within BACK_SOON_SECONDS; always once they hold
        SHARED_PREPARATION_INPUTS inputs (another runner tokenizes them beside it)."""
        if self.total_inputs >= SHARED_PREPARATION_INPUTS:
            return True
        return not (self._runners or 0 < ends_in < BACK_SOON_SECONDS)

    def __bool__(self) -> bool:
        return bool(self._waiting)

    def add(self, priority: int, inputs: int, preparation: Preparation) -> None:
        self._waiting.append((priority, inputs, preparation))
        self.inputs[priority] += inputs
        self.total_inputs += inputs

    def take(self, foreground_only: bool = False) -> list[Preparation]:
        """Every waiting preparation (of the default lane and above only, with
        `foreground_only`), higher lanes first (each lane in order)."""
        if foreground_only:
            waiting = [each for each in self._waiting if not is_background(each[0])]
            self._waiting = [each for each in self._waiting if is_background(each[0])]
            for priority, inputs, _ in waiting:
                self.total_inputs -= inputs
                self.inputs.pop(priority, None)  # every input of the lane goes
        else:
            waiting, self._waiting = self._waiting, []
            self.inputs.clear()
            self.total_inputs = 0
        waiting.sort(key=lambda each: each[0])
        return [preparation for _, _, preparation in waiting]

    def has_foreground(self) -> bool:
        """Whether a preparation of the default lane or above waits."""
        return any(count for lane, count in self.inputs.items() if not is_background(lane))


def run_all(preparations: list[Preparation], tokenizing: Tokenizing | None = None) -> None:
    """Run each, within `tokenizing` their texts (one tokenizer call for them all, which lets
    the GIL go, where each request's own call for a text or two would hold it). A preparation
    fails its own request on any error; one that still raises (something not an Exception: it
    failed its request first) is logged, and the runner goes on, as a CPU-pool thread would."""
    texts = [text for preparation in preparations for text in preparation.texts]
    with tokenizing(texts) if tokenizing is not None and texts else nullcontext():
        for preparation in preparations:
            try:
                preparation.run(*preparation.args)
            except BaseException:
                logger.exception("preparing a request failed")
