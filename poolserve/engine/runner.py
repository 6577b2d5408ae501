"""The runner thread: takes prepared batches, runs forward + pooling, completes the requests.

An exception in one batch fails only the requests in that batch; the runner goes on serving.
If the thread itself dies, `alive` turns false and every waiting request is failed at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import numpy as np

from poolserve.engine.collate import Batch
from poolserve.engine.scheduler import Scheduler
from poolserve.engine.stats import EngineStats
from poolserve.errors import EngineUnavailableError, InferenceError

logger = logging.getLogger(__name__)

Forward = Callable[[Batch], np.ndarray]


class Runner:
    def __init__(self, scheduler: Scheduler, forward: Forward, stats: EngineStats) -> None:
        self._scheduler = scheduler
        self._forward = forward
        self._stats = stats
        self._died = threading.Event()

    @property
    def alive(self) -> bool:
        return not self._died.is_set()

    def run(self) -> None:
        """The runner thread's loop; returns when the scheduler is closed and drained."""
        try:
            while (batch := self._scheduler.take()) is not None:
                self._run_batch(batch)
        except BaseException as exc:
            self._died.set()
            logger.critical("the runner thread died: %r", exc, exc_info=exc)
            error = EngineUnavailableError(f"the model runner stopped: {exc!r}")
            for item in self._scheduler.abort():
                item.group.fail(error)
            raise

    def _run_batch(self, batch: Batch) -> None:
        started = time.perf_counter()
        for item in batch.items:
            if item.group.first_batch_started_at is None:
                item.group.first_batch_started_at = started
        try:
            outputs = self._forward(batch)
        except Exception as exc:
            self._stats.failed_batches += 1
            logger.exception("a batch of %d items failed", len(batch.items))
            error = InferenceError(f"inference failed for this request's batch: {exc}")
            for group in {id(item.group): item.group for item in batch.items}.values():
                group.fail(error)
            return
        ended = time.perf_counter()
        stats = self._stats
        stats.batches += 1
        stats.items += len(batch.items)
        stats.padded_tokens += batch.padded_tokens
        stats.batch_sizes[len(batch.items)] += 1
        for row, item in enumerate(batch.items):
            item.group.last_batch_ended_at = ended
            item.group.set_output(item.index, outputs[row])
