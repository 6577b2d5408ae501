"""A thread pool whose queue serves higher priority lanes first, with aging (engine/lanes.py).

The standard library's `ThreadPoolExecutor` runs jobs in the order they were submitted, so one
client's large request (many chunks to tokenize, large responses to write) holds every later
client's small one behind it. Here a job's place in the queue is its submission number plus
`JOBS_PER_LANE` for each lane it is below the highest: jobs of one lane run in the order they
were submitted, a higher lane's job overtakes a lower one's, and a job is overtaken by at most
`JOBS_PER_LANE` × (lanes of difference) jobs submitted after it.

A job costs the thread that queues it little: `post` makes no future (a request's stages hand
over to each other by themselves), and a waiting thread is woken only when no awake thread is
free to take the job (a wake-up is a system call on both threads, and a contender for the
GIL). `holding()` queues a thread's jobs together: the runner finishes a batch's requests with
one wake-up, not one each.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

from poolserve.config.priorities import HIGHEST_PRIORITY
from poolserve.engine.lanes import JOBS_PER_LANE

logger = logging.getLogger("poolserve")

# A queued job: its place, its number (unique: the tuple never compares further), then what to
# run, its arguments, and what to call instead if the pool closes before it runs (or None).
_Job = tuple[int, int, Callable[..., Any], tuple[Any, ...], Callable[[], Any] | None]
# A job posted: its lane, what to run, its arguments, what to call if it is dropped.
_Posted = tuple[int, Callable[..., Any], tuple[Any, ...], Callable[[], Any] | None]


def _run_into(future: Future[Any], fn: Callable[..., Any], *args: Any) -> None:
    """Run `fn(*args)` into `future` (a submitted job's)."""
    if not future.set_running_or_notify_cancel():
        return
    try:
        result = fn(*args)
    except BaseException as exc:  # the waiter gets it; the worker lives on
        future.set_exception(exc)
    else:
        future.set_result(result)


class LaneExecutor:
    """`workers` threads running queued jobs, higher lanes first (see the module)."""

    def __init__(self, workers: int, thread_name_prefix: str) -> None:
        self._condition = threading.Condition()
        self._queue: list[_Job] = []
        self._numbers = itertools.count()
        self._closed = False
        # Threads not waiting for a job (running one, or woken to take one), and running one.
        self._awake = workers
        self._running = 0
        # Per thread: the jobs it holds back while in `holding()`.
        self._held = threading.local()
        self._threads = [
            threading.Thread(target=self._work, name=f"{thread_name_prefix}_{index}", daemon=True)
            for index in range(workers)
        ]
        for thread in self._threads:
            thread.start()

    def submit(
        self, priority: int, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
    ) -> Future[Any]:
        """`fn(*args, **kwargs)` in `priority`'s lane; its future holds the outcome (cancelled
        if the pool closes first)."""
        future: Future[Any] = Future()
        call = fn if not kwargs else (lambda *a: fn(*a, **kwargs))
        self.post(priority, _run_into, future, call, *args, dropped=future.cancel)
        return future

    def post(
        self,
        priority: int,
        fn: Callable[..., Any],
        /,
        *args: Any,
        dropped: Callable[[], Any] | None = None,
    ) -> None:
        """`fn(*args)` in `priority`'s lane, no future: `fn` handles its own errors (one it
        raises is logged, the worker lives on), and `dropped()` runs if the pool closes before
        it does."""
        held: list[_Posted] | None = getattr(self._held, "jobs", None)
        if held is not None:
            held.append((priority, fn, args, dropped))
            return
        self._queue_jobs([(priority, fn, args, dropped)])

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """Jobs this thread posts meanwhile are queued at the end, together (one lock, one
        wake-up at most)."""
        if getattr(self._held, "jobs", None) is not None:  # already holding
            yield
            return
        held: list[_Posted] = []
        self._held.jobs = held
        try:
            yield
        finally:
            self._held.jobs = None
            if held:
                self._queue_jobs(held, refused=False)

    def _queue_jobs(self, jobs: list[_Posted], refused: bool = True) -> None:
        """Queue `jobs`; once closed, raise (`refused`) or drop them."""
        with self._condition:
            closed = self._closed
            if closed and refused:
                raise RuntimeError("cannot schedule new futures after shutdown")
            for priority, fn, args, dropped in [] if closed else jobs:
                number = next(self._numbers)
                place = number + JOBS_PER_LANE * (priority - HIGHEST_PRIORITY)
                heapq.heappush(self._queue, (place, number, fn, args, dropped))
            # A thread is woken for a job no awake thread is free to take (once woken, a thread
            # runs every job there is before it waits again): jobs queued together wake one.
            free = self._awake - self._running
            if not closed and len(self._queue) > free and self._awake < len(self._threads):
                self._awake += 1
                self._condition.notify()
        if closed:  # outside the lock: a drop fails a request, whose callbacks may post
            for *_, on_drop in jobs:
                if on_drop is not None:
                    on_drop()

    def shutdown(self, wait: bool = True) -> None:
        """Take no more jobs and drop those not started; with `wait`, let the running ones
        finish first."""
        with self._condition:
            self._closed = True
            dropped, self._queue = self._queue, []
            self._condition.notify_all()
        for *_, on_drop in dropped:
            if on_drop is not None:
                on_drop()
        if wait:
            current = threading.current_thread()
            for thread in self._threads:
                if thread is not current:
                    thread.join()

    def _work(self) -> None:
        condition = self._condition
        ran = False
        while True:
            with condition:
                if ran:
                    self._running -= 1
                while not self._queue:
                    if self._closed:
                        return
                    self._awake -= 1
                    condition.wait()
                    # Woken by a post (which counted it awake) or by shutdown (which did not).
                    if self._closed and not self._queue:
                        return
                _, _, fn, args, _ = heapq.heappop(self._queue)
                self._running += 1
            try:
                fn(*args)
            except BaseException:  # a posted job handles its own errors: this is a bug
                logger.exception("a CPU-pool job failed")
            del fn, args  # let go of its arguments (a request's texts) before waiting again
            ran = True
