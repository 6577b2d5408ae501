"""A runner thread: takes batches from the shared scheduler, collates and runs them, completes
requests. The engine runs one or more of them over one copy of the weights.

Each runner gets its forward (`Backend.executor`) on its own thread, and only it calls it.
An exception in one batch fails only the requests in that batch (each request of a failed batch
is retried alone, so one bad input fails only its own request); the runner goes on serving.
If the thread itself dies, it fails the batch it held, reports itself dead and tells the engine
(`on_death`), which fails every waiting request once no runner is left.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

from poolserve.engine.collate import Batch
from poolserve.engine.model_backend import Forward
from poolserve.engine.scheduler import Scheduler
from poolserve.engine.stats import EngineStats
from poolserve.engine.work import BatchMark, WorkItem
from poolserve.errors import EngineUnavailableError, InferenceError

logger = logging.getLogger(__name__)


class Runner:
    def __init__(
        self,
        index: int,
        scheduler: Scheduler,
        collate: Callable[[list[WorkItem]], Batch],
        load: Callable[[], Forward],
        stats: EngineStats,
        *,
        threads: int = 1,
        on_death: Callable[[], None] = lambda: None,
        deliveries: Callable[[], contextlib.AbstractContextManager[None]] = contextlib.nullcontext,
        express: bool = False,
        nice: int = 0,
    ) -> None:
        self.index = index
        self._scheduler = scheduler
        self._collate = collate
        self._load = load
        self._stats = stats
        # Intra-op threads of this runner's batches (times 1 + runners lent to a batch).
        self._threads = threads
        self._on_death = on_death
        # Held around a batch's deliveries: the CPU-pool jobs they start (each finished
        # request's answer) queued together.
        self._deliveries = deliveries
        # The express runner takes its batches from `next_express_batch` (scheduler.py).
        self.express = express
        self._take = scheduler.next_express_batch if express else scheduler.next_batch
        # Added to the thread's nice value (and its torch threads'): the runners beside an
        # express runner give it, and the event loop, the cores first.
        self._nice = nice
        self._died = threading.Event()
        # Completes once this runner's forward is ready (or with the loading error).
        self.ready: Future[None] = Future()

    @property
    def alive(self) -> bool:
        return not self._died.is_set()

    def run(self) -> None:
        """The runner thread: get the forward, then run batches until closed and drained."""
        if self._nice:
            lower_priority(self._nice)
        try:
            forward = self._load()
        except BaseException as exc:
            self._die()
            self.ready.set_exception(exc)
            return
        self.ready.set_result(None)
        items: list[WorkItem] | None = None
        try:
            while (assignment := self._take()) is not None:
                items = assignment.items
                try:
                    threads = self._threads * (1 + assignment.borrowed)
                    self._run_batch(forward, items, threads)
                finally:
                    self._scheduler.batch_ended(assignment)
                items = None
        except BaseException as exc:
            logger.critical("runner %d died: %r", self.index, exc, exc_info=exc)
            error = EngineUnavailableError(f"the model runner stopped: {exc!r}")
            for item in items or []:
                item.group.fail(error)
            self._die()
            raise

    def _die(self) -> None:
        self._died.set()
        self._stats.runner_died(self.index)
        self._on_death()

    def _run_batch(
        self, forward: Forward, items: list[WorkItem], threads: int, *, isolate: bool = True
    ) -> None:
        """Run one batch. If it fails and holds several requests, each is retried alone, so an
        input that breaks the model fails only its own request."""
        stats = self._stats
        started, cpu_started = time.perf_counter(), time.thread_time()
        mark = BatchMark(started, len(items), sum(item.cost for item in items))
        for item in items:
            item.group.batch_started(mark)
        stats.batch_started()
        try:
            batch = self._collate(items)
            outputs = forward(batch, threads)
            if len(outputs) != len(items):
                raise RuntimeError(f"the model gave {len(outputs)} outputs for {len(items)} inputs")
        except Exception as exc:
            stats.batch_ended(self.index, items=0, tokens=0, padded_tokens=0, seconds=0.0)
            groups = {id(item.group): item.group for item in items}
            if isolate and len(groups) > 1:
                logger.warning(
                    "a batch of %d requests failed (%r); retrying each request alone",
                    len(groups),
                    exc,
                )
                for group in groups.values():
                    mine = [item for item in items if item.group is group]
                    self._run_batch(forward, mine, threads, isolate=False)
                return
            logger.exception("a batch of %d items failed", len(items))
            # The exception's text stays in the log: it may describe server internals.
            error = InferenceError("inference failed for this request; the server log has details")
            for group in groups.values():
                group.fail(error)
            return
        except BaseException:
            stats.batch_ended(self.index, items=0, tokens=0, padded_tokens=0, seconds=0.0)
            raise
        # The CPU interval read inside the wall one: a thread's CPU never exceeds its wall time.
        cpu_seconds = time.thread_time() - cpu_started
        ended = time.perf_counter()
        mark.ended, mark.padded_tokens = ended, batch.padded_tokens
        stats.batch_ended(
            self.index,
            items=len(items),
            tokens=mark.tokens,
            padded_tokens=batch.padded_tokens,
            seconds=ended - started,
            held_bytes=batch.held_bytes,
            cpu_seconds=cpu_seconds,
        )
        with self._deliveries():
            for row, item in enumerate(items):
                item.deliver(outputs[row], ended)


def thread_nice() -> int:
    """The calling thread's nice value (Linux keeps one per thread; threads it starts inherit
    it)."""
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def lower_priority(nice: int) -> None:
    """Raise this thread's nice value by `nice` (threads it starts later inherit it); where the
    system refuses, say so and go on at the priority it has."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), thread_nice() + nice)
    except OSError as exc:
        logger.warning(
            "could not lower a runner thread's priority (%s): the express runner "
            "shares the cores evenly with it",
            exc,
        )
