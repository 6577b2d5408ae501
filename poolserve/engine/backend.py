"""The model backend seam: weights loaded once and shared, one executor per runner thread.

`Backend.load()` runs once, on the first runner's thread, before any executor exists;
`Backend.executor()` then runs on each runner's own thread and returns that runner's `Forward`,
warmed up. `TorchBackend` is eager PyTorch or, with `compile`, a torch.compile'd module over the
same weights. Tests wrap a backend to inject faults (a slow or failing forward) without touching
the engine's internals.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np
import torch

from poolserve.config import CompileMode
from poolserve.engine.collate import Batch
from poolserve.engine.compiled import compile_module
from poolserve.engine.executor import CompiledForward, ModelExecutor
from poolserve.engine.tokenizer import TextTokenizer
from poolserve.engine.work import RequestGroup, WorkItem
from poolserve.models.kinds import Head
from poolserve.models.loader import ModelSpec, load_module

logger = logging.getLogger(__name__)

# One batch through the model with at most `threads` intra-op threads: one float32 array per item.
Forward = Callable[[Batch, int], Sequence[np.ndarray]]

WARM_UP_TEXT = "a longer sentence to warm up the model with " * 40


class Backend(Protocol):
    def load(self) -> None:
        """Load the weights (once, on the first runner's thread)."""
        ...

    def executor(self) -> Forward:
        """A warmed-up forward for the calling runner thread (after `load`)."""
        ...


class TorchBackend:
    """Eager PyTorch, or with `compile` on/auto the model's main head through torch.compile
    (its other heads, such as an embedding model's `token_embed`, stay eager: they are rare,
    and each compiled head costs start-up time). The compiled graphs are built at start-up for
    the thread counts a runner uses on its own (1 for small batches, and `threads`); a batch on
    cores lent by idle runners runs eagerly, since any other count would recompile."""

    def __init__(
        self,
        spec: ModelSpec,
        collate: Callable[[list[WorkItem]], Batch],
        *,
        single_thread_tokens: int,
        threads: int = 1,
        compile: CompileMode = "off",
    ) -> None:
        self._spec = spec
        self._collate = collate
        self._single_thread_tokens = single_thread_tokens
        self._threads = threads
        self._compile = compile
        self._module: Callable[..., torch.Tensor] | None = None
        self._compiled: CompiledForward | None = None

    @property
    def compile_mode(self) -> CompileMode:
        return self._compile

    @property
    def compiled(self) -> bool:
        """True once `load` has compiled (and warmed) the main head's graphs."""
        return self._compiled is not None

    def load(self) -> None:
        module = load_module(self._spec)
        self._module = module
        if self._compile == "off":
            return
        run = compile_module(module, self._spec, self._compile)
        if run is None:
            return
        compiled = CompiledForward(run, self._spec.heads[0], frozenset({1, self._threads}))
        # Build every graph serving will need now (a batch of one and of more, which
        # torch.compile specializes, at each thread count), so no request waits on a compile.
        self._compiled = compiled
        started = time.perf_counter()
        try:
            self._warm_up(self._new_executor(), heads=(compiled.head,))
        except Exception as exc:
            logger.warning(
                "torch.compile failed for %s (%r); serving it eagerly", self._spec.name, exc
            )
            self._compiled = None
            return
        logger.info(
            "%s: compiled (and warmed up) in %.1f s", self._spec.name, time.perf_counter() - started
        )

    def executor(self) -> Forward:
        started = time.perf_counter()
        executor = self._new_executor()
        self._warm_up(executor, heads=self._spec.heads)
        logger.info(
            "%s: a runner warmed up in %.1f s (%s)",
            self._spec.name,
            time.perf_counter() - started,
            "compiled" if self._compiled is not None else "eager",
        )
        return executor

    def _new_executor(self) -> ModelExecutor:
        if self._module is None:
            raise RuntimeError("TorchBackend.executor() before load()")
        return ModelExecutor(
            self._module, self._spec.device, self._single_thread_tokens, self._compiled
        )

    def _warm_up(self, executor: ModelExecutor, heads: Sequence[Head]) -> None:
        """Run batches of one and of eight, short and long, at each thread count the runner
        uses on its own; for a cross-encoder also with token type ids (its query-document
        pairs carry them, single texts do not, and torch.compile builds a graph for each)."""
        tokenizer = TextTokenizer(self._spec.tokenizer_json)
        longest = self._spec.max_model_len
        short, long = tokenizer.encode_batch(["warm up", WARM_UP_TEXT], truncate_to=longest)
        typed = (False, True) if self._spec.kind == "cross_encoder" else (False,)
        for head in heads:
            for threads in sorted({1, self._threads}):
                for ids, with_types, size in itertools.product((short, long), typed, (1, 8)):
                    types = [0] * len(ids) if with_types else None
                    item = WorkItem(RequestGroup(size), 0, ids, types, head=head)
                    batch = self._collate([item] * size)
                    if executor.threads_for(batch, threads) == threads:
                        executor(batch, threads)
