"""The one shared thread pool for CPU work: post-processing, response building, and tokenizing
the requests too large for a runner to prepare itself (engine/preparations.py).

Its size is explicit (`--cpu-workers`). Its queue serves higher priority lanes first, with aging
(lane_executor.py); a job runs at the default priority unless its caller names one. Several
models may share it (one server, one pool): each of its threads lazily builds its own processor
(a tokenizer: fast tokenizers are not re-entrant) of each model it prepares inputs for; so
does each runner thread that prepares them (`processor` serves any thread).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from typing import Any, ParamSpec, TypeVar

from poolserve.config.priorities import DEFAULT_PRIORITY
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
        self, source: Future[A], fn: Callable[[A], T], priority: int = DEFAULT_PRIORITY
    ) -> Future[T]:
        """A future for `fn(source's result)`, run in the pool as soon as `source` succeeds.

        The thread that completes `source` (the runner) hands the next stage straight to the
        pool, so the event loop wakes once per request instead of once per stage.
        """
        result: Future[T] = Future()

        def closed() -> None:
            with contextlib.suppress(InvalidStateError):  # the waiter may have cancelled it
                result.set_exception(
                    EngineUnavailableError("the engine closed before this request finished")
                )

        def run_next(next_stage: Callable[[A], T], value: A) -> None:
            try:
                outcome = next_stage(value)
            except BaseException as exc:  # the waiter gets it; the worker lives on
                with contextlib.suppress(InvalidStateError):
                    result.set_exception(exc)
            else:
                with contextlib.suppress(InvalidStateError):
                    result.set_result(outcome)

        # `source` keeps this callback (and so `fn` and what it holds: the request's group,
        # whose future is `source`) after calling it: a reference cycle that only the garbage
        # collector's rare full collections would free, with the request's outputs in it.
        # The callback lets go of `fn` as it runs.
        pending = [fn]

        def start_next(done: Future[A]) -> None:
            next_stage = pending.pop()
            if done.cancelled():  # the waiter cancelled the request
                result.cancel()
            elif (error := done.exception()) is not None:
                with contextlib.suppress(InvalidStateError):
                    result.set_exception(error)
            elif result.set_running_or_notify_cancel():
                try:
                    self.post_at(priority, run_next, next_stage, done.result(), dropped=closed)
                except EngineUnavailableError as exc:
                    result.set_exception(exc)

        source.add_done_callback(start_next)
        return result

    def then_in_loop(
        self, source: Future[A], fn: Callable[[A], T], priority: int = DEFAULT_PRIORITY
    ) -> asyncio.Future[T]:
        """`then` for a waiter on the running event loop (call it there): a future of the loop,
        settled on it once `fn` has run. The pool thread hands the outcome to the loop itself,
        so there is no future between the two to chain (`asyncio.wrap_future`). Cancelling the
        returned future (its waiter gave up) cancels nothing else; a cancelled `source` cancels
        it."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[T] = loop.create_future()

        def settle(outcome: T | None, error: BaseException | None) -> None:  # on the loop
            if answer.done():  # its waiter cancelled it
                return
            if error is not None:
                answer.set_exception(error)
            else:
                answer.set_result(outcome)  # type: ignore[arg-type]

        def to_loop(callback: Callable[..., object], *args: Any) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits
                loop.call_soon_threadsafe(callback, *args)

        def run_next(next_stage: Callable[[A], T], value: A) -> None:
            try:
                outcome = next_stage(value)
            except BaseException as exc:  # the waiter gets it; the worker lives on
                to_loop(settle, None, exc)
            else:
                to_loop(settle, outcome, None)

        def closed() -> None:
            error = EngineUnavailableError("the engine closed before this request finished")
            to_loop(settle, None, error)

        # As in `then`: the callback lets go of `fn` as it runs (no cycle through `source`).
        pending = [fn]

        def start_next(done: Future[A]) -> None:
            next_stage = pending.pop()
            if done.cancelled():
                to_loop(answer.cancel)
            elif (error := done.exception()) is not None:
                to_loop(settle, None, error)
            else:
                try:
                    self.post_at(priority, run_next, next_stage, done.result(), dropped=closed)
                except EngineUnavailableError as exc:
                    to_loop(settle, None, exc)

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
