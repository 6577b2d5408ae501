"""Running one collated batch through the model, on the runner thread.

On CPU it also picks torch's intra-op thread count per batch. With OpenMP threads that wait
passively (see `poolserve._environment`), splitting a small batch across cores costs more in
wake-ups than it gains: measured on a 2-core machine, one sentence takes 3.8 ms on one thread
and 6.2 ms on two, while a batch of 32 takes 38 ms on one and 23 ms on two. Batches below
`single_thread_tokens` padded tokens therefore run on one thread.
"""

from __future__ import annotations

import numpy as np
import torch

from poolserve.engine.collate import Batch
from poolserve.models import PoolingModule
from poolserve.models.module import TOKEN_HEADS


class ModelExecutor:
    """Callable that runs a batch; create and call it on the runner thread only."""

    def __init__(
        self, module: PoolingModule, device: torch.device, single_thread_tokens: int
    ) -> None:
        self._module = module
        self._device = device
        self._wide_threads = torch.get_num_threads()
        self._threads = self._wide_threads
        self._single_thread_tokens = single_thread_tokens if device.type == "cpu" else 0

    def _use_threads(self, batch: Batch) -> None:
        threads = 1 if batch.padded_tokens < self._single_thread_tokens else self._wide_threads
        if threads != self._threads:
            torch.set_num_threads(threads)
            self._threads = threads

    def __call__(self, batch: Batch) -> list[np.ndarray]:
        """One float32 array per item: a vector, or one row per real token for token heads."""
        self._use_threads(batch)
        device = self._device
        with torch.inference_mode():
            output = self._module(
                batch.head,
                batch.input_ids.to(device, non_blocking=True),
                batch.attention_mask.to(device, non_blocking=True),
                None
                if batch.token_type_ids is None
                else batch.token_type_ids.to(device, non_blocking=True),
            )
        result: np.ndarray = output.cpu().numpy()
        if batch.head in TOKEN_HEADS:
            return [result[row, : item.length] for row, item in enumerate(batch.items)]
        return list(result)
