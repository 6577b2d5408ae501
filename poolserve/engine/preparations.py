"""Small requests' preparations, waiting for a runner to run them before its next batch.

Under load a runner is awake and comes back for work anyway: a small request it tokenizes and
submits itself reaches the engine without waking any thread (waking a sleeping one costs a
system call on both threads, about 12 µs on the waker on a 2-core VM, and a turn at the GIL),
and every request prepared meanwhile is in the next batch. An idle runner is woken for one:
it prepares the request and runs it, one wake-up where the CPU pool would have taken two.
Larger requests, and images, are prepared in the CPU pool (engine/pipeline.py says which).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import NamedTuple

from poolserve.config.priorities import is_background

logger = logging.getLogger("poolserve")


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


class Preparations:
    """The preparations waiting, with their lanes and their requests' inputs (the scheduler's
    lock guards them; its queue depth counts their inputs as waiting)."""

    def __init__(self) -> None:
        self._waiting: list[tuple[int, int, Preparation]] = []
        # Their inputs by lane, and in all (an int: read without the lock).
        self.inputs: Counter[int] = Counter()
        self.total_inputs = 0

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
