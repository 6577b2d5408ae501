"""The model backend seam: weights loaded once and shared, one executor per runner thread.

`Backend.load()` runs once, on the first runner's thread, before any executor exists;
`Backend.executor()` then runs on each runner's own thread and returns that runner's `Forward`,
warmed up. What crosses the seam is plain: numpy batches in (engine/collate.py), one float32 array
per item out, device and dtype as names (`ModelSpec`). A backend is a module with a factory
(`make_backend`), registered by name in poolserve/backends/__init__.py (`--backend`); the torch one
is backends/torch/torch_backend.py. Tests wrap a backend to inject faults (a slow or failing
forward) without touching the engine's internals.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np

from poolserve.backends import BACKENDS
from poolserve.config import EngineConfig
from poolserve.engine.collate import Batch
from poolserve.engine.work import WorkItem
from poolserve.errors import SettingError
from poolserve.models.spec import ModelSpec

# One batch through the model with at most `threads` intra-op threads: one float32 array per item.
Forward = Callable[[Batch, int], Sequence[np.ndarray]]
# Items to a batch, packed if asked (engine/collate.py).
Collate = Callable[[list[WorkItem], bool], Batch]


class Backend(Protocol):
    def load(self) -> None:
        """Load the weights (once, on the first runner's thread)."""
        ...

    def executor(self) -> Forward:
        """A warmed-up forward for the calling runner thread (after `load`)."""
        ...


# How the main head's forward was obtained: compiled ahead of time at this start ("built"), from
# the cache ("cached"), by torch.compile ("jit"), or not compiled ("eager").
CompileSource = Literal["built", "cached", "jit", "eager"]


@dataclass(frozen=True)
class CompileReport:
    source: CompileSource
    seconds: float = 0.0


# Builds the backend of a model (`make_backend` of a backend's module): the seam where tests
# inject faults.
BackendFactory = Callable[[ModelSpec, EngineConfig, Collate], Backend]


def backend_named(name: str) -> BackendFactory:
    """The factory of the backend called `name`; an unknown name is a SettingError naming them."""
    module = BACKENDS.get(name)
    if module is None:
        raise SettingError(f"unknown --backend {name!r}; the backends: {', '.join(BACKENDS)}")
    factory: BackendFactory = importlib.import_module(module).make_backend
    return factory
