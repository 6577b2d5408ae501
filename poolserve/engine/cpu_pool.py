"""The one shared thread pool for CPU work: tokenization, post-processing, response building.

Its size is explicit (`--cpu-workers`). Each of its threads lazily builds its own tokenizer.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from poolserve.engine.tokenizer import TextTokenizer

P = ParamSpec("P")
T = TypeVar("T")


class CpuPool:
    def __init__(self, workers: int, tokenizer_json: str) -> None:
        if workers < 1:
            raise ValueError("cpu_workers must be at least 1")
        self.workers = workers
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="poolserve-cpu")
        self._tokenizer_json = tokenizer_json
        self._local = threading.local()

    def tokenizer(self) -> TextTokenizer:
        """The calling thread's tokenizer, built on first use."""
        tokenizer: TextTokenizer | None = getattr(self._local, "tokenizer", None)
        if tokenizer is None:
            tokenizer = self._local.tokenizer = TextTokenizer(self._tokenizer_json)
        return tokenizer

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        return self._executor.submit(fn, *args, **kwargs)

    async def run(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run `fn` in the pool and await it without blocking the event loop."""
        return await asyncio.wrap_future(self._executor.submit(fn, *args, **kwargs))

    def warm_up(self) -> None:
        """Build every thread's tokenizer now rather than on the first requests."""
        barrier = threading.Barrier(self.workers)

        def build() -> None:
            self.tokenizer()
            barrier.wait()

        for future in [self._executor.submit(build) for _ in range(self.workers)]:
            future.result()

    def shutdown(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)
