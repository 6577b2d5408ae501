"""The runner with a fake forward: a failing batch fails only its groups, and the runner goes on.

A runner thread that dies must fail the batch it held and report itself dead (what happens to
the requests still waiting is the engine's business: tests/unit/engine/test_core.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

import numpy as np
import pytest

from poolserve.engine.collate import Batch, collate, text_item
from poolserve.engine.runner import Runner
from poolserve.engine.scheduler import Scheduler
from poolserve.engine.stats import EngineStats
from poolserve.engine.work import RequestGroup, WorkItem
from poolserve.errors import EngineUnavailableError, InferenceError

POISON = 666
WAIT = 5  # seconds any single outcome may take; the real ones take milliseconds
THREAD_DIES = pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")


class Fatal(BaseException):
    """Escapes `except Exception`: kills the runner thread, as an interpreter-level error would."""


def fake_forward(batch: Batch, threads: int = 1) -> np.ndarray:
    """One row per item: [length, first token] — easy to check, and it fails on POISON."""
    if any(item.payload.input_ids[0] == POISON for item in batch.items):
        raise RuntimeError("poisoned batch")
    return np.array([[item.cost, item.payload.input_ids[0]] for item in batch.items], np.float32)


@dataclass
class Harness:
    scheduler: Scheduler
    runner: Runner
    stats: EngineStats
    threads: list[threading.Thread]


def start(
    forward: Callable[[Batch, int], np.ndarray], *, max_batch_size: int, submit: list[WorkItem]
) -> Harness:
    stats = EngineStats()
    scheduler = Scheduler(
        max_batch_tokens=16384, max_batch_size=max_batch_size, window=1024, stats=stats
    )
    scheduler.submit(submit)  # before the thread starts, so the batches are deterministic
    runner = Runner(
        0, scheduler, lambda items: collate(items, pad_token_id=0), lambda: forward, stats
    )
    threads = [threading.Thread(target=runner.run, daemon=True)]
    for thread in threads:
        thread.start()
    return Harness(scheduler, runner, stats, threads)


@pytest.fixture
def harnesses() -> Iterator[list[Harness]]:
    started: list[Harness] = []
    yield started
    for harness in started:
        harness.scheduler.close()
        for thread in harness.threads:
            thread.join(WAIT)


def group_of(*first_tokens: int, length: int = 3) -> tuple[RequestGroup, list[WorkItem]]:
    group = RequestGroup(len(first_tokens))
    items = [text_item(group, i, [tok] + [5] * (length - 1)) for i, tok in enumerate(first_tokens)]
    return group, items


def test_failed_batch_fails_only_its_groups_and_runner_keeps_serving(
    harnesses: list[Harness],
) -> None:
    b, b_items = group_of(10)
    a, a_items = group_of(POISON, 11)
    c, c_items = group_of(12, 13)
    d, d_items = group_of(14)
    # One item per batch. A's second item comes after C and D: by the time the scheduler reaches
    # it, A has failed, so it must be skipped instead of run.
    order = [b_items[0], a_items[0], *c_items, *d_items, a_items[1]]
    harness = start(fake_forward, max_batch_size=1, submit=order)
    harnesses.append(harness)

    with pytest.raises(InferenceError, match="inference failed"):
        a.future.result(WAIT)
    assert [row.tolist() for row in b.future.result(WAIT)] == [[3, 10]]
    assert [row.tolist() for row in c.future.result(WAIT)] == [[3, 12], [3, 13]]
    assert [row.tolist() for row in d.future.result(WAIT)] == [[3, 14]]

    e, e_items = group_of(15, 16)
    harness.scheduler.submit(e_items)
    assert [row.tolist() for row in e.future.result(WAIT)] == [[3, 15], [3, 16]]
    assert harness.runner.alive
    assert harness.stats.failed_batches == 1
    assert harness.stats.items_skipped == 1
    assert harness.stats.batches == 6  # B, C0, C1, D, E0, E1: A's batch counts as failed
    assert harness.stats.items == 6


def test_only_the_poisoned_request_of_a_failed_batch_fails(harnesses: list[Harness]) -> None:
    """A and B share a batch that fails because of A's input: each is retried alone, so only A
    fails; C, in a batch of its own, is untouched."""
    a, a_items = group_of(POISON, length=4)
    b, b_items = group_of(20, length=4)
    c, c_items = group_of(21, length=200)
    # Size-2 batches: A and B (same length) go together, C (far longer) alone.
    harness = start(fake_forward, max_batch_size=2, submit=[*a_items, *b_items, *c_items])
    harnesses.append(harness)
    with pytest.raises(InferenceError):
        a.future.result(WAIT)
    assert [row.tolist() for row in b.future.result(WAIT)] == [[4, 20]]
    assert [row.tolist() for row in c.future.result(WAIT)] == [[200, 21]]
    assert harness.stats.failed_batches == 2  # the shared batch, then A alone


@THREAD_DIES
def test_dead_runner_fails_the_request_of_the_batch_it_died_on(harnesses: list[Harness]) -> None:
    """The batch in flight when the runner dies must not leave its requests waiting forever.

    Runner.run catches the BaseException and fails what `scheduler.abort()` returns — the items
    still waiting — but the batch it was running has already left the scheduler, so its groups
    are never failed: an HTTP client waiting on one hangs with no response.
    """
    calls = []

    def forward(batch: Batch, threads: int) -> np.ndarray:
        calls.append(batch)
        raise Fatal("the runner thread is going down")

    in_flight, items = group_of(40)
    harnesses.append(start(forward, max_batch_size=1, submit=items))
    try:
        error = in_flight.future.exception(WAIT)
    except FutureTimeout:
        pytest.fail(f"the in-flight request was never completed ({len(calls)} forward call)")
    assert isinstance(error, EngineUnavailableError | InferenceError)


@THREAD_DIES
def test_shape_mismatch_from_forward_fails_the_batch_not_the_runner(
    harnesses: list[Harness],
) -> None:
    """A forward that returns too few rows is a failed batch, like any other forward error.

    Today the rows are handed out after the `try` around the forward (and collate runs before
    it): the IndexError escapes into `Runner.run`, kills the thread, and the batch's requests
    are left waiting forever.
    """

    def forward(batch: Batch, threads: int) -> np.ndarray:
        return fake_forward(batch)[:1]

    bad, bad_items = group_of(50, 51)
    harness = start(forward, max_batch_size=8, submit=bad_items)
    harnesses.append(harness)
    try:
        error = bad.future.exception(WAIT)
    except FutureTimeout:
        pytest.fail("the request whose batch had a bad output was never completed")
    assert isinstance(error, InferenceError)
    assert harness.runner.alive


def _burn(seconds: float) -> float:
    """Spend `seconds` of this thread's CPU; the CPU seconds spent."""
    started = time.thread_time()
    while time.thread_time() - started < seconds:
        pass
    return time.thread_time() - started


def test_the_runner_counts_its_threads_cpu_beside_its_wall_time(
    harnesses: list[Harness],
) -> None:
    """A forward that computes counts its CPU in cpu_seconds; one that waits (here on the
    test, which burns 50 ms of its own CPU first) counts the wait in busy_seconds only."""
    burned: list[float] = []
    entered, release = threading.Event(), threading.Event()

    def forward(batch: Batch, threads: int = 1) -> np.ndarray:
        if batch.items[0].payload.input_ids[0] == 1:
            burned.append(_burn(0.05))
        else:
            entered.set()
            release.wait(WAIT)
        return fake_forward(batch)

    computed, computed_items = group_of(1)
    harness = start(forward, max_batch_size=1, submit=computed_items)
    harnesses.append(harness)
    computed.future.result(WAIT)
    after_compute = harness.stats.snapshot()
    assert after_compute.cpu_seconds >= burned[0]
    assert after_compute.cpu_seconds <= after_compute.busy_seconds

    waited, waited_items = group_of(2)
    harness.scheduler.submit(waited_items)
    assert entered.wait(WAIT)
    _burn(0.05)
    release.set()
    waited.future.result(WAIT)
    after_wait = harness.stats.snapshot()
    busy = after_wait.busy_seconds - after_compute.busy_seconds
    cpu = after_wait.cpu_seconds - after_compute.cpu_seconds
    assert busy >= 0.05
    assert cpu < busy / 2
    assert after_wait.as_dict()["cpu_seconds"] == after_wait.cpu_seconds
