"""The eager module of a model whose main head a restart serves from compiled libraries alone
(torch_backend.py), built at its first call: a batch of another head, or one the libraries do
not run. Loading transformers' model code and the weights takes most of a restart's seconds,
and the compiled libraries hold the weights already, so a restart leaves it until it is needed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import torch

from poolserve.backends.torch_model.loader import enable_packing, load_module
from poolserve.backends.torch_model.module import PoolingModule
from poolserve.config.model_config import PackingMode
from poolserve.errors import ModelLoadError
from poolserve.models.kinds import Head
from poolserve.models.spec import ModelSpec

logger = logging.getLogger(__name__)


class DeferredModule:
    """Callable as the `PoolingModule` it stands for (`forward`, `forward_packed`), which it
    builds on the first call, once: runners that call meanwhile wait for that build."""

    def __init__(self, name: str, build: Callable[[], PoolingModule]) -> None:
        self._name = name
        self._build = build
        self._lock = threading.Lock()
        self._module: PoolingModule | None = None

    @property
    def built(self) -> bool:
        return self._module is not None

    def module(self) -> PoolingModule:
        with self._lock:
            if self._module is None:
                logger.info(
                    "%s: loading the eager module for a batch the compiled forward does not run",
                    self._name,
                )
                # A runner calls it inside inference mode, whose tensors the load must not make.
                with torch.inference_mode(False):
                    self._module = self._build()
            return self._module

    def __call__(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        output: torch.Tensor = self.module()(*args, **kwargs)
        return output

    def forward_packed(self, *args: Any) -> torch.Tensor:
        return self.module().forward_packed(*args)


def deferred_module(
    spec: ModelSpec, packing: PackingMode, packed_heads: frozenset[Head]
) -> DeferredModule:
    """The eager module of a restart served from the cache, built at its first call with its
    packing checked again: the heads packed must be those the libraries were built for."""

    def build() -> PoolingModule:
        module = load_module(spec)
        assert isinstance(module, PoolingModule)  # an image-text model is not compiled
        if packing != "off":
            why = enable_packing(module, spec)
            if frozenset(head for head in spec.heads if module.packs(head)) != packed_heads:
                raise ModelLoadError(
                    f"{spec.name}: its packed batches passed their check when the compiled "
                    f"libraries were built, and fail it now ({why}); delete the compile cache "
                    "(POOLSERVE_CACHE_DIR) and restart"
                )
        return module

    logger.info(
        "%s: the weights are in the compiled libraries; the eager module loads at its first use "
        "(%s, or a batch they do not run)",
        spec.name,
        ", ".join(spec.heads[1:]) or "none other",
    )
    return DeferredModule(spec.name, build)
