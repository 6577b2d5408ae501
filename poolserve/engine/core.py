"""The engine: composition root of the CPU pool, the scheduler and the runner thread.

Everything here is synchronous and thread-safe; the HTTP server and the offline API are thin
adapters over `open_group` / `submit` and the group's future.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from functools import partial

import numpy as np
import torch

from poolserve.config import EngineConfig
from poolserve.engine.collate import Batch, collate
from poolserve.engine.cpu_pool import CpuPool
from poolserve.engine.executor import ModelExecutor
from poolserve.engine.runner import Runner
from poolserve.engine.scheduler import Scheduler, SchedulerClosedError
from poolserve.engine.stats import EngineStats
from poolserve.engine.work import RequestGroup, WorkItem
from poolserve.errors import EngineUnavailableError, ModelLoadError
from poolserve.models import ModelSpec, load_module

logger = logging.getLogger(__name__)


class EngineCore:
    def __init__(self, model: ModelSpec, config: EngineConfig) -> None:
        if config.max_batch_tokens < model.max_model_len:
            raise ModelLoadError(
                f"--max-batch-tokens {config.max_batch_tokens} is less than the model's length "
                f"limit {model.max_model_len}: the longest input would never fit in a batch"
            )
        self.model = model
        self.config = config
        self.stats = EngineStats()
        self.cpu = CpuPool(config.cpu_workers, model.tokenizer_json)
        self._collate = partial(
            collate, pad_token_id=model.pad_token_id, pin_memory=model.device.type == "cuda"
        )
        self._scheduler = Scheduler(
            max_batch_tokens=config.max_batch_tokens,
            max_batch_size=config.max_batch_size,
            window=config.schedule_window,
            stats=self.stats,
        )
        self._runner = Runner(self._scheduler, self._collate, self._load_forward, self.stats)
        self._thread = threading.Thread(
            target=self._runner.run, name="poolserve-runner", daemon=True
        )
        self._started = False

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Start the threads and wait until the model is loaded; raises if loading fails."""
        self.cpu.warm_up()
        self._thread.start()
        self._started = True
        try:
            self._runner.ready.result()
        except BaseException:
            self.close()
            raise

    def close(self, timeout: float | None = None) -> None:
        """Finish every admitted item, then stop the threads and the pool."""
        self._scheduler.close()
        if self._started:
            self._thread.join(timeout)
        self.cpu.shutdown()

    @property
    def alive(self) -> bool:
        return self._started and self._runner.alive and self._thread.is_alive()

    # -- work -------------------------------------------------------------------------------

    def open_group(self, size: int) -> RequestGroup:
        return RequestGroup(size)

    def submit(self, items: Iterable[WorkItem]) -> None:
        if not self.alive:
            raise EngineUnavailableError("the model runner is not running; see the server log")
        try:
            self._scheduler.submit(items)
        except SchedulerClosedError as exc:
            raise EngineUnavailableError("the server is shutting down; retry elsewhere") from exc

    @property
    def queued_items(self) -> int:
        return self._scheduler.queued_items

    @property
    def queued_tokens(self) -> int:
        return self._scheduler.queued_tokens

    # -- threads ----------------------------------------------------------------------------

    def _load_forward(self) -> Callable[[Batch], Sequence[np.ndarray]]:
        """Runs on the runner thread: load the module, warm it up, return the executor."""
        if self.config.torch_threads is not None:
            torch.set_num_threads(self.config.torch_threads)
        executor = ModelExecutor(
            load_module(self.model), self.model.device, self.config.single_thread_tokens
        )
        tokenizer = self.cpu.tokenizer()
        for head in self.model.heads:
            for text in ("warm up", "a longer sentence to warm up the model with " * 8):
                ids = tokenizer.encode_batch([text], truncate_to=None)[0]
                for size in (1, 8):
                    item = WorkItem(RequestGroup(size), 0, ids, head=head)
                    executor(self._collate([item] * size))
        return executor
