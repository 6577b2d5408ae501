"""The model backend seam: weights loaded once and shared, one executor per runner thread.

`Backend.load()` runs once, on the first runner's thread, before any executor exists;
`Backend.executor()` then runs on each runner's own thread and returns that runner's `Forward`,
warmed up. `TorchBackend` is eager PyTorch or, with `compile`, a torch.compile'd module over the
same weights. Tests wrap a backend to inject faults (a slow or failing forward) without touching
the engine's internals.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np
import torch

from poolserve.config import CompileMode
from poolserve.engine.collate import Batch
from poolserve.engine.compiled import compile_module
from poolserve.engine.executor import ModelExecutor
from poolserve.engine.tokenizer import TextTokenizer
from poolserve.engine.work import RequestGroup, WorkItem
from poolserve.models import ModelSpec, load_module
from poolserve.models.kinds import Head

logger = logging.getLogger(__name__)

# One batch through the model with at most `threads` intra-op threads: one float32 array per item.
Forward = Callable[[Batch, int], Sequence[np.ndarray]]

WARM_UP_TEXTS = ("warm up", "a longer sentence to warm up the model with " * 8)


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
    and each compiled head costs start-up time)."""

    def __init__(
        self,
        spec: ModelSpec,
        collate: Callable[[list[WorkItem]], Batch],
        *,
        single_thread_tokens: int,
        compile: CompileMode = "off",
    ) -> None:
        self._spec = spec
        self._collate = collate
        self._single_thread_tokens = single_thread_tokens
        self._compile = compile
        self._run: Callable[..., torch.Tensor] | None = None
        self.compiled = False

    def load(self) -> None:
        module = load_module(self._spec)
        self._run = module
        if self._compile == "off":
            return
        compiled = compile_module(module, self._spec, self._compile)
        if compiled is None:
            return
        main_head = self._spec.heads[0]

        def run(head: Head, *args: torch.Tensor | None) -> torch.Tensor:
            return (compiled if head == main_head else module)(head, *args)

        # Compile every graph serving will need now (a batch of one and of more, which
        # torch.compile specializes), so that no request waits on a compile.
        self._run = run
        try:
            self._warm_up(self._new_executor(), heads=(main_head,))
        except Exception as exc:
            logger.warning(
                "torch.compile failed for %s (%r); serving it eagerly", self._spec.name, exc
            )
            self._run = module
        else:
            self.compiled = True

    def executor(self) -> Forward:
        executor = self._new_executor()
        self._warm_up(executor, heads=self._spec.heads)
        return executor

    def _new_executor(self) -> ModelExecutor:
        if self._run is None:
            raise RuntimeError("TorchBackend.executor() before load()")
        return ModelExecutor(self._run, self._spec.device, self._single_thread_tokens)

    def _warm_up(self, forward: Forward, heads: Sequence[Head]) -> None:
        tokenizer = TextTokenizer(self._spec.tokenizer_json)
        for head in heads:
            for text in WARM_UP_TEXTS:
                ids = tokenizer.encode_batch([text], truncate_to=None)[0]
                for size in (1, 8):
                    item = WorkItem(RequestGroup(size), 0, ids, head=head)
                    forward(self._collate([item] * size), 1)
