"""Units of work: a `RequestGroup` is one request's set of inputs, a `WorkItem` one tokenized input.

A group's items may run in batches on several runner threads at once, so its results and timing
marks are written under the group's own lock (the last writer completes it). The group's
`concurrent.futures.Future` carries the outcome to whoever waits (an event loop or a caller
thread), and cancelling it tells the scheduler to skip the group's items that have not run yet.
"""

from __future__ import annotations

import contextlib
import threading
import time
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Any

from poolserve.models.kinds import Head


@dataclass(eq=False)
class RequestGroup:
    """One request's inputs; its future completes with all outputs, in input order."""

    size: int
    future: Future[list[Any]] = field(default_factory=Future)
    submitted_at: float = field(default_factory=time.perf_counter)
    # Set by the runner threads: when the first of this group's batches started, the last ended.
    first_batch_started_at: float | None = None
    last_batch_ended_at: float | None = None
    # Items handed to the scheduler so far (written under the scheduler's lock): a request is
    # tokenized and submitted chunk by chunk.
    submitted: int = 0
    _results: list[Any] = field(default_factory=list)
    _remaining: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._results = [None] * self.size
        self._remaining = self.size

    @property
    def finished(self) -> bool:
        """Done, failed or cancelled: its remaining items need not run."""
        return self.future.done()

    def cancel(self) -> None:
        self.future.cancel()

    def batch_started(self, at: float) -> None:
        with self._lock:
            if self.first_batch_started_at is None or at < self.first_batch_started_at:
                self.first_batch_started_at = at

    def set_output(self, index: int, output: Any, ended_at: float) -> None:
        """Record one item's output (runner threads); completes the future with the last one."""
        with self._lock:
            if self.last_batch_ended_at is None or ended_at > self.last_batch_ended_at:
                self.last_batch_ended_at = ended_at
            self._results[index] = output
            self._remaining -= 1
            complete = self._remaining == 0
        if complete:
            self._settle(lambda: self.future.set_result(self._results))

    def fail(self, error: BaseException) -> None:
        self._settle(lambda: self.future.set_exception(error))

    def _settle(self, action: Any) -> None:
        # The waiter may have cancelled the future from its own thread a moment ago.
        if not self.future.done():
            with contextlib.suppress(InvalidStateError):
                action()

    @property
    def queue_time(self) -> float:
        started = self.first_batch_started_at
        return 0.0 if started is None else started - self.submitted_at

    @property
    def inference_time(self) -> float:
        started, ended = self.first_batch_started_at, self.last_batch_ended_at
        return 0.0 if started is None or ended is None else ended - started


@dataclass(eq=False, slots=True)
class WorkItem:
    """One tokenized input of a group, ready to be batched."""

    group: RequestGroup
    index: int
    input_ids: list[int]
    token_type_ids: list[int] | None = None
    # What the forward pass must return for this item; a batch holds one head only.
    head: Head = "embed"
    # None: attend to every token (see TokenizedText.attention_mask).
    attention_mask: list[int] | None = None
    # Tokens before this one are left out of pooling (see TokenizedText.pool_from).
    pool_from: int = 0

    @property
    def length(self) -> int:
        return len(self.input_ids)
