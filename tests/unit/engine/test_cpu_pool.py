"""The CPU pool's stage chaining: it frees a request's outputs by reference counting alone, and
its chain to the event loop carries results, errors and cancellation."""

from __future__ import annotations

import asyncio
import gc
import threading
import weakref
from collections.abc import Iterator
from concurrent.futures import Future
from functools import partial

import numpy as np
import pytest

from poolserve.engine.cpu_pool import CpuPool
from poolserve.errors import EngineUnavailableError


class Request:
    def __init__(self, future: Future[np.ndarray]) -> None:
        self.future = future  # the cycle: next stage → request → source → its callback


def finish(request: Request, outputs: np.ndarray) -> float:
    return float(outputs.sum())


@pytest.fixture
def pool() -> Iterator[CpuPool]:
    """A pool of one thread, the garbage collector off meanwhile: what is freed, reference
    counting freed."""
    pool = CpuPool(1)
    gc.collect()
    gc.disable()
    try:
        yield pool
    finally:
        gc.enable()
        pool.shutdown()


def watched() -> tuple[Future[np.ndarray], np.ndarray, weakref.ref[np.ndarray]]:
    """A source future, the outputs it will hold, and a weak reference to them."""
    outputs = np.ones(1024, dtype=np.float32)
    return Future(), outputs, weakref.ref(outputs)


def test_a_finished_chain_holds_nothing_that_only_the_garbage_collector_could_free(
    pool: CpuPool,
) -> None:
    """The source future keeps its callbacks; if a callback kept the next stage (which holds
    the request, and through it the source), the outputs would wait for a full collection."""
    source, outputs, held = watched()
    chained = pool.then(source, partial(finish, Request(source)))
    source.set_result(outputs)
    assert chained.result(5) == 1024.0
    del outputs, source, chained
    assert held() is None


@pytest.mark.anyio
async def test_a_chain_to_the_loop_settles_there_and_frees_what_it_held(pool: CpuPool) -> None:
    source, outputs, held = watched()
    answer = pool.then_in_loop(source, partial(finish, Request(source)))
    runner = threading.Thread(target=source.set_result, args=(outputs,))
    runner.start()
    assert await answer == 1024.0
    del outputs, source, answer
    # The answer may come before the runner and the pool's worker let go of their frames: wait
    # for both to be done with them (the worker takes its next job only after).
    runner.join()
    assert pool.submit(lambda: "next").result(5) == "next"
    assert held() is None


def fail(value: object) -> float:
    raise ValueError(f"cannot finish {value!r}")


@pytest.mark.anyio
async def test_a_chain_to_the_loop_carries_errors_and_cancellation() -> None:
    pool = CpuPool(1)
    try:
        raising: Future[int] = Future()
        answer = pool.then_in_loop(raising, fail)
        raising.set_result(1)
        with pytest.raises(ValueError, match="cannot finish 1"):
            await answer
        failed: Future[int] = Future()
        answer = pool.then_in_loop(failed, float)
        failed.set_exception(EngineUnavailableError("runner gone"))
        with pytest.raises(EngineUnavailableError, match="runner gone"):
            await answer
        cancelled: Future[int] = Future()
        answer = pool.then_in_loop(cancelled, float)
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await answer
        # A waiter that gave up first: the pool's outcome comes and is dropped, nothing raises.
        late: Future[int] = Future()
        answer = pool.then_in_loop(late, float)
        answer.cancel()
        late.set_result(2)
        assert pool.submit(lambda: "the pool lives on").result(5) == "the pool lives on"
    finally:
        pool.shutdown()


@pytest.mark.anyio
async def test_a_chain_to_the_loop_may_run_on_the_thread_that_completes_its_source() -> None:
    """`here`: the next stage runs on the completing thread (a runner answering a small
    request itself), even with the pool closed; its errors still reach the loop."""
    pool = CpuPool(1)
    pool.shutdown()  # (the pool is not used: a job posted to it would fail the answer)
    threads: list[str] = []

    def stage(value: int) -> float:
        threads.append(threading.current_thread().name)
        return float(value)

    source: Future[int] = Future()
    answer = pool.then_in_loop(source, stage, here=True)
    runner = threading.Thread(target=source.set_result, args=(5,), name="the runner")
    runner.start()
    assert await answer == 5.0 and threads == ["the runner"]
    runner.join()
    raising: Future[int] = Future()
    answer = pool.then_in_loop(raising, fail, here=True)
    threading.Thread(target=raising.set_result, args=(1,)).start()
    with pytest.raises(ValueError, match="cannot finish 1"):
        await answer


@pytest.mark.anyio
async def test_a_stage_to_run_here_goes_to_the_pool_when_the_loop_completes_its_source() -> None:
    """The event loop does no CPU work: a source completed on the loop's own thread (the
    result cache may) has its next stage run in the pool after all."""
    pool = CpuPool(1)
    threads: list[str] = []

    def stage(value: int) -> float:
        threads.append(threading.current_thread().name)
        return float(value)

    try:
        source: Future[int] = Future()
        answer = pool.then_in_loop(source, stage, here=True)
        source.set_result(7)  # on the loop's thread
        assert await answer == 7.0
        assert threads[0].startswith("poolserve-cpu")
    finally:
        pool.shutdown()


@pytest.mark.anyio
async def test_a_chain_to_the_loop_fails_once_the_pool_is_closed() -> None:
    pool = CpuPool(1)
    source: Future[int] = Future()
    answer = pool.then_in_loop(source, float)
    pool.shutdown()
    source.set_result(3)
    with pytest.raises(EngineUnavailableError, match="closed"):
        await answer


def failing(request: Request, outputs: np.ndarray) -> float:
    raise ValueError("the stage failed")


@pytest.mark.anyio
async def test_a_failed_stage_leaves_no_cycle_holding_the_outputs(pool: CpuPool) -> None:
    """The exception's traceback holds the frame that caught it: were that frame to hold the
    future the exception went into, the outputs would wait for a garbage collection."""
    source, outputs, held = watched()
    chained = pool.then(source, partial(failing, Request(source)))
    source.set_result(outputs)
    assert "the stage failed" in str(chained.exception(5))
    del outputs, source, chained
    assert pool.submit(lambda: "next").result(5) == "next"  # the worker let go of its job
    assert held() is None

    source, outputs, held = watched()
    answer = pool.then_in_loop(source, partial(failing, Request(source)))
    source.set_result(outputs)
    # Waited for without raising it here (then this frame would be in its traceback), and
    # woken by `wait`'s own future (the loop's handle that wakes a task holds what it was
    # waiting for while the task runs).
    await asyncio.wait([answer])
    assert isinstance(answer.exception(), ValueError)
    del outputs, source, answer
    assert pool.submit(lambda: "next").result(5) == "next"
    assert held() is None
    assert gc.collect() == 0  # and nothing else was left in a cycle
