"""The runner thread: owns the model; takes batches, collates and runs them, completes requests.

The model is loaded on this thread and only ever touched here (see `models.loader.ModelSpec`).
An exception in one batch fails only the requests in that batch (each request of a failed batch
is retried alone, so one bad input fails only its own request); the runner goes on serving.
If the thread itself dies, `alive` turns false and every waiting request is failed at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future

import numpy as np

from poolserve.engine.collate import Batch
from poolserve.engine.scheduler import Scheduler
from poolserve.engine.stats import EngineStats
from poolserve.engine.work import WorkItem
from poolserve.errors import EngineUnavailableError, InferenceError

logger = logging.getLogger(__name__)

Forward = Callable[[Batch], Sequence[np.ndarray]]


class Runner:
    def __init__(
        self,
        scheduler: Scheduler,
        collate: Callable[[list[WorkItem]], Batch],
        load: Callable[[], Forward],
        stats: EngineStats,
    ) -> None:
        self._scheduler = scheduler
        self._collate = collate
        self._load = load
        self._stats = stats
        self._died = threading.Event()
        # Completes once the model is loaded and warmed up (or with the loading error).
        self.ready: Future[None] = Future()

    @property
    def alive(self) -> bool:
        return not self._died.is_set()

    def run(self) -> None:
        """The runner thread: load the model, then run batches until closed and drained."""
        try:
            forward = self._load()
        except BaseException as exc:
            self._died.set()
            self.ready.set_exception(exc)
            self._scheduler.abort()
            return
        self.ready.set_result(None)
        items: list[WorkItem] | None = None
        try:
            while (items := self._scheduler.next_batch()) is not None:
                self._run_batch(forward, items)
        except BaseException as exc:
            self._died.set()
            logger.critical("the runner thread died: %r", exc, exc_info=exc)
            error = EngineUnavailableError(f"the model runner stopped: {exc!r}")
            for item in [*(items or []), *self._scheduler.abort()]:
                item.group.fail(error)
            raise

    def _run_batch(self, forward: Forward, items: list[WorkItem], *, isolate: bool = True) -> None:
        """Run one batch. If it fails and holds several requests, each is retried alone, so an
        input that breaks the model fails only its own request."""
        started = time.perf_counter()
        for item in items:
            if item.group.first_batch_started_at is None:
                item.group.first_batch_started_at = started
        try:
            batch = self._collate(items)
            outputs = forward(batch)
            if len(outputs) != len(items):
                raise RuntimeError(f"the model gave {len(outputs)} outputs for {len(items)} inputs")
        except Exception as exc:
            self._stats.failed_batches += 1
            groups = {id(item.group): item.group for item in items}
            if isolate and len(groups) > 1:
                logger.warning(
                    "a batch of %d requests failed (%r); retrying each request alone",
                    len(groups),
                    exc,
                )
                for group in groups.values():
                    mine = [item for item in items if item.group is group]
                    self._run_batch(forward, mine, isolate=False)
                return
            logger.exception("a batch of %d items failed", len(items))
            # The exception's text stays in the log: it may describe server internals.
            error = InferenceError("inference failed for this request; the server log has details")
            for group in groups.values():
                group.fail(error)
            return
        ended = time.perf_counter()
        stats = self._stats
        stats.batches += 1
        stats.items += len(items)
        stats.padded_tokens += batch.padded_tokens
        stats.busy_seconds += ended - started
        stats.batch_sizes[len(items)] += 1
        stats.batch_tokens[batch.padded_tokens] += 1
        for row, item in enumerate(items):
            item.group.last_batch_ended_at = ended
            item.group.set_output(item.index, outputs[row])
