"""The loaded model: the part every runtime that runs a transformer holds. The checkpoint loaded
in torch on its device, in the precision asked for or measured fastest (precision.py), its
packed heads chosen, and what a runner needs to run it: its threads, an executor of its batches
(executor.py) over the forwards a runtime runs faster (compiled, or another runtime's graph), and
the warm-up of both. The torch runtime compiles its main head; ONNX Runtime and OpenVINO export
it and run the graph; every runtime runs the model's other heads here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import torch

from poolserve._environment import cache_dir
from poolserve.backends.torch_model import precision, warm_up
from poolserve.backends.torch_model.batch_invariant import invariant_module
from poolserve.backends.torch_model.deferred_module import DeferredModule, deferred_module
from poolserve.backends.torch_model.executor import CompiledForward, ModelExecutor, use_threads
from poolserve.backends.torch_model.image_text import ImageTextModule
from poolserve.backends.torch_model.loader import choose_packing, load_module
from poolserve.backends.torch_model.module import PoolingModule
from poolserve.config.model_config import PackingMode
from poolserve.engine.model_backend import Collate, PrecisionReport
from poolserve.models.kinds import Head
from poolserve.models.spec import ModelSpec

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunnerSeats:
    """How the engine's runners run a model: how many, each one's intra-op threads (None: on
    CUDA, where torch's own count stays), how many forwards may run at once (the runners' and
    the express runner's), from how many tokens a batch uses more than one thread, and the
    largest batch."""

    runners: int = 1
    threads: int = 1
    runner_threads: int | None = None
    callers: int = 1
    single_thread_tokens: int = 0
    max_batch_size: int = 256

    @property
    def thread_counts(self) -> list[int]:
        """The intra-op thread counts a runner runs a batch at: one for small batches, its own,
        and every runner's for a large batch that borrows the idle runners' cores."""
        return sorted({1, self.threads, self.threads * self.runners})


class LoadedModel:
    """A model loaded in torch (`load`), or standing in for it until its first call where a
    restart needs no eager forward (`defer`), and its runners' executors."""

    def __init__(
        self,
        spec: ModelSpec,
        collate: Collate,
        seats: RunnerSeats,
        *,
        packing: PackingMode = "auto",
        batch_invariant: bool = False,
    ) -> None:
        self.spec = spec
        self.collate = collate
        self.seats = seats
        self.packing = packing
        self._load: Callable[[ModelSpec], PoolingModule | ImageTextModule] = (
            invariant_module if batch_invariant else load_module
        )
        self.module: PoolingModule | ImageTextModule | DeferredModule | None = None
        # The heads whose batches are packed (set by `load` or `defer`).
        self.packed_heads: frozenset[Head] = frozenset()
        self.precision: PrecisionReport | None = None  # how `--dtype auto` chose, if it did

    def own_threads(self) -> None:
        """The calling runner's intra-op threads, set before its first operator."""
        if self.seats.runner_threads is not None:
            use_threads(self.seats.runner_threads)

    def load(self, *, packs: bool = True) -> PoolingModule | ImageTextModule:
        """The module in the precision asked for, or (`auto` on a CPU with several fast
        precisions) in the one measured fastest on this machine, its spec told, and (`packs`:
        for a runtime that runs packed batches) its packed heads chosen."""
        module, self.precision = precision.load_in_precision(
            cache_dir(), self.spec, self._load, self.collate, self.seats.threads
        )
        if self.precision is not None:
            self.spec = replace(self.spec, dtype=self.precision.dtype)
        self.module = module
        if packs:
            self.packed_heads = choose_packing(module, self.spec, self.packing)
        return module

    def defer(self, packed_heads: frozenset[Head]) -> None:
        """Stand in for the module until a batch needs it (deferred_module.py)."""
        self.module = deferred_module(self.spec, self.packing, packed_heads)
        self.packed_heads = packed_heads

    @property
    def deferred(self) -> bool:
        """Whether the eager module is yet to be built (a restart served from the cache)."""
        return isinstance(self.module, DeferredModule) and not self.module.built

    def executor(self, faster: Sequence[CompiledForward] = ()) -> ModelExecutor:
        """An executor of batches that runs the main head by `faster` where it has a forward
        for the batch, and the module otherwise."""
        if self.module is None:
            raise RuntimeError("an executor of the model before it was loaded")
        return ModelExecutor(
            self.module,
            torch.device(self.spec.device),
            self.seats.single_thread_tokens,
            faster,
        )

    def runner_executor(
        self, faster: Sequence[CompiledForward], source: str, *, every_shape: bool = False
    ) -> ModelExecutor:
        """The calling runner's executor over `faster` (its threads set first), warmed up at
        each thread count it runs; a restart served from the cache warms what `faster` runs,
        not the eager module. `source` names what runs the main head in the log line."""
        self.own_threads()
        started = time.perf_counter()
        executor = self.executor(faster)
        heads = tuple(each.head for each in faster) if self.deferred else self.spec.heads
        counts = sorted({1, self.seats.threads, *(n for each in faster for n in each.runs)})
        self.warm_up(executor, heads, counts, every_shape=every_shape)
        logger.info(
            "%s: a runner warmed up in %.1f s (%s)",
            self.spec.name,
            time.perf_counter() - started,
            source,
        )
        return executor

    def warm_up(
        self,
        executor: ModelExecutor,
        heads: Sequence[Head],
        counts: Sequence[int],
        *,
        every_shape: bool = False,
    ) -> None:
        """`heads` run once through `executor` at each of `counts` threads (warm_up.py)."""
        warm_up.heads(
            executor,
            self.spec,
            self.collate,
            heads,
            threads=self.seats.threads,
            counts=counts,
            packed_heads=self.packed_heads,
            every_shape=every_shape,
            max_batch_size=self.seats.max_batch_size,
        )
