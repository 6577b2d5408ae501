"""Running one collated batch through the torch model, on a runner thread.

The batch arrives as numpy arrays (engine/collate.py); `to_torch` makes them tensors without a
copy on the CPU (pinned and sent ahead on CUDA).

On CPU it also sets torch's intra-op thread count for the batch. torch keeps that count per
thread (OpenMP's own setting), so each runner has its own; the scheduler tells a runner how many
threads a batch may use (its own, plus those of idle runners that lend it their cores). With
OpenMP threads that wait passively (see `poolserve._environment`), splitting a small batch across
cores costs more in wake-ups than it gains: measured on a 2-core machine, one sentence takes
3.8 ms on one thread and 6.2 ms on two, while one 256-token passage takes 45 ms on one and 33 ms
on two. Batches below `single_thread_tokens` padded tokens therefore always run on one thread.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from poolserve.backends.torch_model.module import TOKEN_HEADS
from poolserve.engine.collate import Batch
from poolserve.models.kinds import Head


def use_threads(threads: int) -> None:
    """Set the calling thread's intra-op thread count.

    torch initializes a thread's count from the last process-wide value the first time that
    thread runs a parallel operator, which would undo a count set before; reading it first
    makes that first initialization happen now.
    """
    torch.get_num_threads()
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


@dataclass(frozen=True)
class TorchBatch:
    """A batch's arrays as tensors on the model's device (see `Batch` for what each holds)."""

    head: Head
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    token_type_ids: torch.Tensor | None
    pool_mask: torch.Tensor | None
    # A packed batch's positions, segments, pool weights, first and last token indices.
    packed: tuple[torch.Tensor, ...] | None
    # A batch of images' pixels (an image-text model's image head).
    pixel_values: torch.Tensor | None = None


def to_torch(batch: Batch, device: torch.device) -> TorchBatch:
    """The batch's arrays as tensors on `device`: shared with numpy on the CPU (no copy)."""

    def tensor(array: np.ndarray) -> torch.Tensor:
        result = torch.from_numpy(array)
        if device.type == "cpu":
            return result
        if device.type == "cuda":
            result = result.pin_memory()
        return result.to(device, non_blocking=True)

    def optional(array: np.ndarray | None) -> torch.Tensor | None:
        return None if array is None else tensor(array)

    packed = batch.packed
    return TorchBatch(
        batch.head,
        tensor(batch.input_ids),
        tensor(batch.attention_mask),
        optional(batch.token_type_ids),
        optional(batch.pool_mask),
        None if packed is None else tuple(tensor(array) for array in packed.arrays()),
        optional(batch.pixel_values),
    )


# A compiled head's forward over a batch (its tensors on the model's device).
CompiledRun = Callable[[TorchBatch], torch.Tensor]


@dataclass(frozen=True)
class CompiledForward:
    """A compiled forward of one head, padded or packed, by the intra-op thread count it was
    compiled for (the compiled kernels fix their thread count: another count would need
    another compile, for seconds, in the middle of serving)."""

    runs: Mapping[int, CompiledRun]
    head: Head
    packed: bool = False
    # A padded forward that reads the batch's pooling mask (AOTInductor's graphs take none).
    takes_pool_mask: bool = False


def run_eagerly(module: Callable[..., torch.Tensor], batch: TorchBatch) -> torch.Tensor:
    """The module's forward over a padded or a packed batch, or a batch of images."""
    if batch.pixel_values is not None:
        images: Callable[[torch.Tensor], torch.Tensor] = module.images  # type: ignore[attr-defined]
        return images(batch.pixel_values)
    if batch.packed is not None:
        forward_packed: Callable[..., torch.Tensor] = module.forward_packed  # type: ignore[attr-defined]
        return forward_packed(batch.head, batch.input_ids, *batch.packed, batch.token_type_ids)
    extra = {} if batch.pool_mask is None else {"pool_mask": batch.pool_mask}
    return module(batch.head, batch.input_ids, batch.attention_mask, batch.token_type_ids, **extra)


class ModelExecutor:
    """Callable that runs a batch; create and call it on one runner thread only.

    Batches run through the first of `compiled` that covers their head, layout and thread
    count, else through the eager module (other heads; a batch running on cores lent by idle
    runners)."""

    def __init__(
        self,
        module: Callable[..., torch.Tensor],
        device: torch.device,
        single_thread_tokens: int,
        compiled: Sequence[CompiledForward] = (),
    ) -> None:
        self._module = module
        self._compiled = tuple(compiled)
        self._device = device
        self._single_thread_tokens = single_thread_tokens if device.type == "cpu" else 0

    def _compiled_run(self, batch: Batch, threads: int) -> CompiledRun | None:
        """The compiled forward for the batch: of its head and layout (a padded graph takes no
        pooling mask), at the most threads compiled for that the batch may use (a batch on
        cores lent by some of the idle runners, not all, uses fewer)."""
        for compiled in self._compiled:
            if batch.head != compiled.head or (batch.packed is not None) != compiled.packed:
                continue
            if batch.pool_mask is not None and not compiled.takes_pool_mask:
                continue
            counts = [count for count in compiled.runs if count <= threads]
            if counts:
                return compiled.runs[max(counts)]
        return None

    def threads_for(self, batch: Batch, threads: int) -> int:
        return 1 if batch.padded_tokens < self._single_thread_tokens else threads

    def __call__(self, batch: Batch, threads: int) -> list[np.ndarray]:
        """One float32 array per item: a vector, or one row per real token for token heads."""
        if self._device.type == "cpu":
            threads = self.threads_for(batch, threads)
            use_threads(threads)
        on_model = to_torch(batch, self._device)
        compiled_run = self._compiled_run(batch, threads)
        with torch.inference_mode():
            if compiled_run is not None:
                output = compiled_run(on_model)
            else:
                output = run_eagerly(self._module, on_model)
        # (`.cpu()` on a CPU tensor is one more call that lets go of the GIL: aot_runtime.py.)
        on_cpu = output if output.device.type == "cpu" else output.cpu()
        result: np.ndarray = on_cpu.numpy()
        if batch.head not in TOKEN_HEADS:
            return list(result)
        if batch.packed is not None:
            return [
                result[row, offset : offset + item.cost]
                for (row, offset), item in zip(batch.packed.places, batch.items, strict=True)
            ]
        # A text item's cost is its tokens: one output row each.
        return [result[row, : item.cost] for row, item in enumerate(batch.items)]
