"""The engine: composition root of the CPU pool, the scheduler thread and the runner thread.

Everything here is synchronous and thread-safe; the HTTP server and the offline API are thin
adapters over `open_group` / `submit` and the group's future.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from functools import partial

import numpy as np
import torch

from poolserve.config import EngineConfig
from poolserve.engine.collate import Batch, collate
from poolserve.engine.cpu_pool import CpuPool
from poolserve.engine.runner import Runner
from poolserve.engine.scheduler import Scheduler, SchedulerClosedError
from poolserve.engine.stats import EngineStats
from poolserve.engine.work import RequestGroup, WorkItem
from poolserve.errors import EngineUnavailableError, ModelLoadError
from poolserve.models import LoadedModel

logger = logging.getLogger(__name__)


class EngineCore:
    def __init__(self, model: LoadedModel, config: EngineConfig) -> None:
        if config.max_batch_tokens < model.max_model_len:
            raise ModelLoadError(
                f"--max-batch-tokens {config.max_batch_tokens} is less than the model's length "
                f"limit {model.max_model_len}: the longest input would never fit in a batch"
            )
        if config.torch_threads is not None:
            torch.set_num_threads(config.torch_threads)
        self.model = model
        self.config = config
        self.stats = EngineStats()
        self.cpu = CpuPool(config.cpu_workers, model.tokenizer_json)
        pad_token_id = int(model.layout.hf_config.get("pad_token_id") or 0)
        self._scheduler = Scheduler(
            max_batch_tokens=config.max_batch_tokens,
            max_batch_size=config.max_batch_size,
            window=config.schedule_window,
            collate=partial(
                collate, pad_token_id=pad_token_id, pin_memory=model.device.type == "cuda"
            ),
            stats=self.stats,
        )
        self._runner = Runner(self._scheduler, self._forward, self.stats)
        self._threads = [
            threading.Thread(target=self._scheduler_loop, name="poolserve-scheduler", daemon=True),
            threading.Thread(target=self._runner.run, name="poolserve-runner", daemon=True),
        ]
        self._started = False

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        self.cpu.warm_up()
        self._warm_up_model()
        for thread in self._threads:
            thread.start()
        self._started = True

    def close(self, timeout: float | None = None) -> None:
        """Finish every admitted item, then stop the threads and the pool."""
        self._scheduler.close()
        if self._started:
            for thread in self._threads:
                thread.join(timeout)
        self.cpu.shutdown()

    @property
    def alive(self) -> bool:
        return self._started and self._runner.alive and all(t.is_alive() for t in self._threads)

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

    # -- threads ----------------------------------------------------------------------------

    def _scheduler_loop(self) -> None:
        try:
            self._scheduler.run()
        except BaseException as exc:
            logger.critical("the scheduler thread died: %r", exc, exc_info=exc)
            error = EngineUnavailableError(f"the batch scheduler stopped: {exc!r}")
            for item in self._scheduler.abort():
                item.group.fail(error)
            raise

    def _forward(self, batch: Batch) -> np.ndarray:
        device = self.model.device
        with torch.inference_mode():
            output = self.model.module(
                batch.input_ids.to(device, non_blocking=True),
                batch.attention_mask.to(device, non_blocking=True),
                None
                if batch.token_type_ids is None
                else batch.token_type_ids.to(device, non_blocking=True),
            )
        result: np.ndarray = output.cpu().numpy()
        return result

    def _warm_up_model(self) -> None:
        tokenizer = self.cpu.tokenizer()
        ids = tokenizer.encode_batch(["warm up"], truncate_to=None)
        items = [WorkItem(RequestGroup(1), 0, ids[0])]
        pad_token_id = int(self.model.layout.hf_config.get("pad_token_id") or 0)
        for _ in range(3):
            self._forward(collate(items, pad_token_id))
