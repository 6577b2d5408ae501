"""A request's outcome, settled once by whichever thread finishes it: the part of
`concurrent.futures.Future` a request group needs, without its cost.

A `Future` makes a `Condition` over an `RLock` with it and takes it on every call: a
one-sentence request asked its group's future whether it was done about four times on the
runners and settled it once, ten lock round trips. Here the state is read without a lock (a
settled outcome never changes back), the one lock is taken only to settle it or add a callback,
and only a thread that blocks for the outcome (the Python API, tests) makes the event it waits
on. (Its in-process A/B against a `Future` may have run the same code twice: docs/benchmarks.md,
the sixth session's section.)

Callbacks run on the thread that settles it (or at once, on the caller's, if it is settled):
they must be quick and hand anything longer on, as `CpuPool.then` does.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import CancelledError
from typing import Any, Generic, Protocol, TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class Outcome(Protocol[T_co]):
    """What a stage that follows another reads of it: a `Completion`, or a `Future`."""

    def cancelled(self) -> bool: ...

    def exception(self, timeout: float | None = None) -> BaseException | None: ...

    def result(self, timeout: float | None = None) -> T_co: ...

    def add_done_callback(self, fn: Callable[[Any], object], /) -> None: ...


PENDING, DONE, FAILED, CANCELLED = 0, 1, 2, 3


class Completion(Generic[T]):
    """Settled once: a result, an exception, or cancelled. Reads as a `Future` to those who
    wait on one (`done`, `cancelled`, `result`, `exception`, `add_done_callback`)."""

    __slots__ = ("_callbacks", "_lock", "_outcome", "_state", "_waiting")

    def __init__(self) -> None:
        self._state = PENDING
        self._outcome: T | BaseException | None = None
        self._callbacks: list[Callable[[Completion[T]], object]] = []
        self._lock = threading.Lock()
        # Made by the first thread that blocks for the outcome; set once it is settled.
        self._waiting: threading.Event | None = None

    def done(self) -> bool:
        return self._state != PENDING

    def cancelled(self) -> bool:
        return self._state == CANCELLED

    def set_result(self, result: T) -> bool:
        """Settle with `result`; False if it was settled before (a cancel won the race)."""
        return self._settle(DONE, result)

    def set_exception(self, error: BaseException) -> bool:
        return self._settle(FAILED, error)

    def cancel(self) -> bool:
        """Cancel it unless it is settled; True if it is cancelled now."""
        return self._settle(CANCELLED, None) or self._state == CANCELLED

    def add_done_callback(self, callback: Callable[[Completion[T]], object]) -> None:
        """`callback(self)` once it is settled: now, if it is."""
        with self._lock:
            if self._state == PENDING:
                self._callbacks.append(callback)
                return
        self._call(callback)

    def result(self, timeout: float | None = None) -> T:
        """The result, waiting up to `timeout` seconds for it (TimeoutError); the exception it
        failed with is raised, CancelledError if it was cancelled."""
        self._wait(timeout)
        if self._state == DONE:
            return self._outcome  # type: ignore[return-value]
        if self._state == CANCELLED:
            raise CancelledError()
        error = self._outcome
        assert isinstance(error, BaseException)
        try:
            raise error
        finally:
            # The traceback holds this frame: without its locals, error → frame → self → error
            # is no cycle for the garbage collector to find (as Future.result does).
            del self, error

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The exception it failed with (None if it succeeded), waiting as `result` does."""
        self._wait(timeout)
        if self._state == CANCELLED:
            raise CancelledError()
        return self._outcome if self._state == FAILED else None  # type: ignore[return-value]

    def _wait(self, timeout: float | None) -> None:
        if self._state != PENDING:
            return
        with self._lock:
            if self._state == PENDING and self._waiting is None:
                self._waiting = threading.Event()
            waiting = self._waiting
        if waiting is not None and not waiting.wait(timeout):
            raise TimeoutError(f"not settled within {timeout} s")

    def _settle(self, state: int, outcome: T | BaseException | None) -> bool:
        with self._lock:
            if self._state != PENDING:
                return False
            self._outcome = outcome
            self._state = state
            callbacks, self._callbacks = self._callbacks, []
            waiting = self._waiting
        if waiting is not None:
            waiting.set()
        for callback in callbacks:
            self._call(callback)
        return True

    def _call(self, callback: Callable[[Completion[T]], object]) -> None:
        try:
            callback(self)
        except Exception:  # as a Future does: one failing callback does not stop the others
            logger.exception("a completion's callback failed")
