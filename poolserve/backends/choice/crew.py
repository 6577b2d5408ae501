"""A trial's runners: as many threads as the server has runners, each with the forward it made on
its own thread (as a runner makes its own), running a pass's batches at once, each taking the
next batch as it is free (as the scheduler hands batches to free runners).

Why not one thread: runtimes scale differently when every runner computes at once (shared
caches, memory bandwidth, AMX units, a runtime's own thread pools). Measured on an Intel Xeon
with AMX, one thread a candidate ranked OpenVINO bf16 and torch bf16 within their noise, while
served by two runners torch ran 1.2x OpenVINO (docs/benchmarks.md).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass

import numpy as np

from poolserve.engine.collate import Batch
from poolserve.engine.model_backend import Backend, Forward


class Crew:
    """The calling thread (with `forward`, made on it) and `runners - 1` helper threads, each
    with its own forward from `backend.executor()`."""

    def __init__(self, backend: Backend, forward: Forward, runners: int, threads: int) -> None:
        self._forward = forward
        self._threads = threads
        self._inboxes: list[queue.SimpleQueue[_Pass | None]] = []
        self._helpers: list[threading.Thread] = []
        try:
            for number in range(1, runners):
                self._start_helper(backend, number)
        except BaseException:
            self.close()
            raise

    def _start_helper(self, backend: Backend, number: int) -> None:
        inbox: queue.SimpleQueue[_Pass | None] = queue.SimpleQueue()
        ready: Future[None] = Future()
        helper = threading.Thread(
            target=_help, args=(backend, inbox, ready), name=f"trial-runner-{number}", daemon=True
        )
        helper.start()
        self._inboxes.append(inbox)
        self._helpers.append(helper)
        ready.result()  # its forward made and warmed up, or what failed there

    def outputs(self, batches: Sequence[Batch]) -> list[np.ndarray]:
        """Every batch run by the crew, their outputs in the batches' order."""
        done = self._run(batches)
        return [output for batch_outputs in done.outputs for output in batch_outputs or ()]

    def first_pass(self, batches: Sequence[Batch], limit: float | None) -> FirstPass:
        """A pass over `batches` that no member starts a batch of once it has run `limit`
        seconds (None: no limit): its outputs in the batches' order where it ran them all."""
        started = time.perf_counter()
        deadline = None if limit is None else started + limit
        done = self._run(batches, deadline)
        seconds = time.perf_counter() - started
        ran = [outputs for outputs in done.outputs if outputs is not None]
        if len(ran) < len(batches):
            return FirstPass(None, seconds, sum(len(outputs) for outputs in ran))
        outputs = [output for batch_outputs in ran for output in batch_outputs]
        return FirstPass(outputs, seconds, len(outputs))

    def timed(self, batches: Sequence[Batch]) -> float:
        """Seconds the crew takes to run every one of `batches`."""
        started = time.perf_counter()
        self._run(batches)
        return time.perf_counter() - started

    def single(self, batch: Batch) -> float:
        """Seconds the calling thread alone takes to run `batch`."""
        started = time.perf_counter()
        self._forward(batch, self._threads)
        return time.perf_counter() - started

    def _run(self, batches: Sequence[Batch], deadline: float | None = None) -> _Pass:
        work = _Pass(batches, self._threads, 1 + len(self._inboxes), deadline)
        for inbox in self._inboxes:
            inbox.put(work)
        work.take_part(self._forward)
        work.wait()
        return work

    def close(self) -> None:
        """Let the helpers (and their forwards) go."""
        for inbox in self._inboxes:
            inbox.put(None)
        for helper in self._helpers:
            helper.join()
        self._inboxes.clear()
        self._helpers.clear()


@dataclass(frozen=True)
class FirstPass:
    """A crew's first pass over some batches: their outputs (None: it was stopped at its limit
    before it ran them all), how long it took, and how many outputs it made."""

    outputs: list[np.ndarray] | None
    seconds: float
    made: int


class _Pass:
    """One pass over the batches, shared by the crew: the next batch to take (none once past
    `deadline`, a `time.perf_counter()` time), each batch's outputs (None: not run), and when
    every member is done."""

    def __init__(
        self, batches: Sequence[Batch], threads: int, members: int, deadline: float | None = None
    ) -> None:
        self._batches = batches
        self._threads = threads
        self._deadline = deadline
        self._next = 0
        self._busy = members
        self._done = threading.Condition()
        self._error: BaseException | None = None
        self.outputs: list[Sequence[np.ndarray] | None] = [None for _ in batches]

    def take_part(self, forward: Forward) -> None:
        try:
            while (index := self._take()) is not None:
                self.outputs[index] = forward(self._batches[index], self._threads)
        except BaseException as exc:
            with self._done:
                self._error = self._error or exc
                self._next = len(self._batches)  # the others stop at their next batch
        finally:
            with self._done:
                self._busy -= 1
                self._done.notify_all()

    def _take(self) -> int | None:
        with self._done:
            if self._next >= len(self._batches):
                return None
            if self._deadline is not None and time.perf_counter() > self._deadline:
                self._next = len(self._batches)  # the others stop at their next batch too
                return None
            self._next += 1
            return self._next - 1

    def wait(self) -> None:
        with self._done:
            self._done.wait_for(lambda: self._busy == 0)
        if self._error is not None:
            raise self._error


def _help(backend: Backend, inbox: queue.SimpleQueue[_Pass | None], ready: Future[None]) -> None:
    try:
        forward = backend.executor()
    except BaseException as exc:
        ready.set_exception(exc)
        return
    ready.set_result(None)
    while (work := inbox.get()) is not None:
        work.take_part(forward)
