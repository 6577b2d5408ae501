"""The one shared thread pool for CPU work: post-processing, response building, and tokenizing
the requests too large for a runner to prepare itself (engine/preparations.py).

Its size is explicit (`--cpu-workers`). Its queue serves higher priority lanes first, with aging
(lane_executor.py); a job runs at the default priority unless its caller names one. Several
models may share it (one server, one pool): each of its threads lazily builds its own processor
(a tokenizer: fast tokenizers are not re-entrant) of each model it prepares inputs for; so
does each runner thread that prepares them (`processor` serves any thread).

A request's stages hand over to each other by themselves (`then`, `then_in_loop`), and let go
of what they hold as they do. A stage that fails hands its exception on, and the exception's
traceback holds the frame that caught it: that frame deletes its locals (the request's outputs,
the future the exception went into) once it has, or future → exception → traceback → frame →
future would be a cycle that only the garbage collector frees, every so many allocations.
`source` keeps its callbacks after calling them: they let go of the
next stage and its future as they run.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from functools import partial
from typing import Any, ParamSpec, TypeVar

from poolserve.config.priorities import DEFAULT_PRIORITY
from poolserve.engine.completion import Outcome
from poolserve.engine.lane_executor import LaneExecutor
from poolserve.errors import EngineUnavailableError

P = ParamSpec("P")
T = TypeVar("T")
A = TypeVar("A")
K = TypeVar("K", bound=str)


class CpuPool:
    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ValueError("cpu_workers must be at least 1")
        self.workers = workers
        self._executor = LaneExecutor(workers, thread_name_prefix="poolserve-cpu")
        self._local = threading.local()

    def processor(self, key: K, build: Callable[[K], T]) -> T:
        """The calling thread's processor built from `key` (a model's tokenizer.json) by
        `build`, on first use. (A str caches its hash and compares by identity first: the
        lookup is cheap for the model's own string.)"""
        processors: dict[str, Any] | None = getattr(self._local, "processors", None)
        if processors is None:
            processors = self._local.processors = {}
        processor: T | None = processors.get(key)
        if processor is None:
            processor = processors[key] = build(key)
        return processor

    def post_at(
        self,
        priority: int,
        fn: Callable[..., Any],
        /,
        *args: Any,
        dropped: Callable[[], Any] | None = None,
    ) -> None:
        """`fn(*args)` in the pool, in `priority`'s lane, with no future: `fn` handles its own
        errors; `dropped()` runs instead if the pool closes first."""
        try:
            self._executor.post(priority, fn, *args, dropped=dropped)
        except RuntimeError as exc:  # the executor was shut down
            raise EngineUnavailableError("the engine is closed; it takes no more work") from exc

    def holding(self) -> contextlib.AbstractContextManager[None]:
        """Jobs the calling thread posts meanwhile are queued together at the end (a runner
        finishing a batch's requests wakes the pool once)."""
        return self._executor.holding()

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        return self.submit_at(DEFAULT_PRIORITY, fn, *args, **kwargs)

    def submit_at(
        self, priority: int, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs
    ) -> Future[T]:
        """`fn(*args, **kwargs)` in the pool, queued in `priority`'s lane."""
        try:
            future: Future[T] = self._executor.submit(priority, fn, *args, **kwargs)
        except RuntimeError as exc:  # the executor was shut down
            raise EngineUnavailableError("the engine is closed; it takes no more work") from exc
        return future

    async def run(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run `fn` in the pool and await it without blocking the event loop."""
        return await asyncio.wrap_future(self.submit(fn, *args, **kwargs))

    async def run_at(
        self, priority: int, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """`run`, queued in `priority`'s lane."""
        return await asyncio.wrap_future(self.submit_at(priority, fn, *args, **kwargs))

    def then(
        self, source: Outcome[A], fn: Callable[[A], T], priority: int = DEFAULT_PRIORITY
    ) -> Future[T]:
        """A future for `fn(source's result)`, run in the pool as soon as `source` succeeds.

        The thread that completes `source` (the runner) hands the next stage straight to the
        pool, so the event loop wakes once per request instead of once per stage.
        """
        result: Future[T] = Future()

        def run_next(next_stage: Callable[[A], T], value: A, result: Future[T]) -> None:
            try:
                outcome = next_stage(value)
            except BaseException as exc:  # the waiter gets it; the worker lives on
                with contextlib.suppress(InvalidStateError):
                    result.set_exception(exc)
                del next_stage, value, result  # (the module's docstring: a failing stage lets go)
            else:
                with contextlib.suppress(InvalidStateError):
                    result.set_result(outcome)

        # `source` keeps this callback after calling it, and `fn` holds the request's group,
        # whose future is `source`: the callback lets go of `fn` and `result` as it runs.
        pending: list[Any] = [fn, result]

        def start_next(done: Outcome[A]) -> None:
            next_stage, result = pending
            pending.clear()
            if done.cancelled():  # the waiter cancelled the request
                result.cancel()
            elif (error := done.exception()) is not None:
                with contextlib.suppress(InvalidStateError):
                    result.set_exception(error)
            elif result.set_running_or_notify_cancel():
                closed = partial(_fail, result.set_exception, CLOSED_MESSAGE)
                try:
                    self.post_at(
                        priority, run_next, next_stage, done.result(), result, dropped=closed
                    )
                except EngineUnavailableError as exc:
                    result.set_exception(exc)
                    del done, result  # (the module's docstring: a failing stage lets go)

        source.add_done_callback(start_next)
        return result

    def then_in_loop(
        self,
        source: Outcome[A],
        fn: Callable[[A], T],
        priority: int = DEFAULT_PRIORITY,
        *,
        here: bool = False,
    ) -> asyncio.Future[T]:
        """`then` for a waiter on the running event loop (call it there): a future of the loop,
        settled on it once `fn` has run. The pool thread hands the outcome to the loop itself,
        so there is no future between the two to chain (`asyncio.wrap_future`). Cancelling the
        returned future (its waiter gave up) cancels nothing else; a cancelled `source` cancels
        it. `here`: `fn` runs on the thread that completes `source` (a runner answering a
        small request itself: engine/pipeline.py), not in the pool, unless that thread is the
        loop's own (the result cache may complete a group there)."""
        loop = asyncio.get_running_loop()
        loop_thread = threading.get_ident()

        def to_loop(callback: Callable[..., object], *args: Any) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits
                loop.call_soon_threadsafe(callback, *args)

        def run_next(next_stage: Callable[[A], T], value: A, answer: asyncio.Future[T]) -> None:
            try:
                outcome = next_stage(value)
            except BaseException as exc:  # the waiter gets it; the worker lives on
                to_loop(_settle, answer, None, exc)
                del next_stage, value, answer  # (the module's docstring: a failing stage lets go)
            else:
                to_loop(_settle, answer, outcome, None)

        # As in `then`: the callback lets go of `fn` and the answer as it runs.
        pending: list[Any] = [fn, loop.create_future()]
        answer: asyncio.Future[T] = pending[1]

        def start_next(done: Outcome[A]) -> None:
            next_stage, answer = pending
            pending.clear()
            if done.cancelled():
                to_loop(answer.cancel)
            elif (error := done.exception()) is not None:
                to_loop(_settle, answer, None, error)
            elif here and threading.get_ident() != loop_thread:
                run_next(next_stage, done.result(), answer)
            else:
                closed = partial(_fail, partial(to_loop, _settle, answer, None), CLOSED_MESSAGE)
                try:
                    self.post_at(
                        priority, run_next, next_stage, done.result(), answer, dropped=closed
                    )
                except EngineUnavailableError as exc:
                    to_loop(_settle, answer, None, exc)
                    del done, answer  # (the module's docstring: a failing stage lets go)

        source.add_done_callback(start_next)
        return answer

    def warm_up(self, key: K, build: Callable[[K], Any]) -> None:
        """Build every thread's processor of this model now rather than on the first requests."""
        barrier = threading.Barrier(self.workers)

        def build_one() -> None:
            self.processor(key, build)
            barrier.wait()

        for future in [self.submit(build_one) for _ in range(self.workers)]:
            future.result()

    def shutdown(self, wait: bool = True) -> None:
        """Drop the tasks not started; with `wait`, let the running ones finish first."""
        self._executor.shutdown(wait=wait)


CLOSED_MESSAGE = "the engine closed before this request finished"


def _fail(set_error: Callable[[BaseException], object], message: str) -> None:
    """A dropped stage's waiter gets an EngineUnavailableError (the pool closed first)."""
    with contextlib.suppress(InvalidStateError):  # the waiter may have cancelled it
        set_error(EngineUnavailableError(message))


def _settle(answer: asyncio.Future[T], outcome: T | None, error: BaseException | None) -> None:
    """On the loop: `then_in_loop`'s answer, unless its waiter cancelled it first."""
    if answer.done():
        return
    if error is not None:
        answer.set_exception(error)
    else:
        answer.set_result(outcome)  # type: ignore[arg-type]
