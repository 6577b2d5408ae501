"""A thread pool whose queue serves higher priority lanes first, with aging (engine/lanes.py).

The standard library's `ThreadPoolExecutor` runs jobs in the order they were submitted, so one
client's large request (many chunks to tokenize, large responses to write) holds every later
client's small one behind it. Here a job's place in the queue is its submission number plus
`JOBS_PER_LANE` for each lane it is below the highest: jobs of one lane run in the order they
were submitted, a higher lane's job overtakes a lower one's, and a job is overtaken by at most
`JOBS_PER_LANE` × (lanes of difference) jobs submitted after it.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from poolserve.engine.lanes import HIGHEST_PRIORITY, JOBS_PER_LANE


@dataclass(order=True)
class _Job:
    place: int
    number: int
    future: Future[Any] = field(compare=False)
    fn: Callable[..., Any] = field(compare=False)
    args: tuple[Any, ...] = field(compare=False)
    kwargs: dict[str, Any] = field(compare=False)

    def run(self) -> None:
        if not self.future.set_running_or_notify_cancel():
            return
        try:
            result = self.fn(*self.args, **self.kwargs)
        except BaseException as exc:  # the waiter gets it; the worker lives on
            self.future.set_exception(exc)
        else:
            self.future.set_result(result)


class LaneExecutor:
    """`workers` threads running submitted jobs, higher lanes first (see the module)."""

    def __init__(self, workers: int, thread_name_prefix: str) -> None:
        self._condition = threading.Condition()
        self._queue: list[_Job] = []
        self._numbers = itertools.count()
        self._closed = False
        self._threads = [
            threading.Thread(target=self._work, name=f"{thread_name_prefix}_{index}", daemon=True)
            for index in range(workers)
        ]
        for thread in self._threads:
            thread.start()

    def submit(
        self, priority: int, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
    ) -> Future[Any]:
        future: Future[Any] = Future()
        with self._condition:
            if self._closed:
                raise RuntimeError("cannot schedule new futures after shutdown")
            number = next(self._numbers)
            place = number + JOBS_PER_LANE * (priority - HIGHEST_PRIORITY)
            heapq.heappush(self._queue, _Job(place, number, future, fn, args, kwargs))
            self._condition.notify()
        return future

    def shutdown(self, wait: bool = True) -> None:
        """Take no more jobs and cancel those not started; with `wait`, let the running ones
        finish first."""
        with self._condition:
            self._closed = True
            dropped, self._queue = self._queue, []
            self._condition.notify_all()
        for job in dropped:
            job.future.cancel()
        if wait:
            current = threading.current_thread()
            for thread in self._threads:
                if thread is not current:
                    thread.join()

    def _work(self) -> None:
        while True:
            with self._condition:
                self._condition.wait_for(lambda: self._queue or self._closed)
                if not self._queue:
                    return
                job = heapq.heappop(self._queue)
            job.run()
            del job  # let go of its arguments (a request's texts) before waiting again
