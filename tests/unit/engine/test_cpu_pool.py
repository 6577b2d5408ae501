"""The CPU pool's stage chaining frees a request's outputs by reference counting alone."""

from __future__ import annotations

import gc
import weakref
from concurrent.futures import Future
from functools import partial

import numpy as np

from poolserve.engine.cpu_pool import CpuPool


class Request:
    def __init__(self, future: Future[np.ndarray]) -> None:
        self.future = future  # the cycle: next stage → request → source → its callback


def finish(request: Request, outputs: np.ndarray) -> float:
    return float(outputs.sum())


def test_a_finished_chain_holds_nothing_that_only_the_garbage_collector_could_free() -> None:
    """The source future keeps its callbacks; if a callback kept the next stage (which holds
    the request, and through it the source), the outputs would wait for a full collection."""
    pool = CpuPool(1)
    try:
        gc.disable()
        source: Future[np.ndarray] = Future()
        outputs = np.ones(1024, dtype=np.float32)
        held = weakref.ref(outputs)

        chained = pool.then(source, partial(finish, Request(source)))
        source.set_result(outputs)
        assert chained.result(5) == 1024.0
        del outputs, source, chained
        assert held() is None
    finally:
        gc.enable()
        pool.shutdown()
