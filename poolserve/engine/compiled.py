"""`--compile`: the model's forward through torch.compile, with its compile cache on disk.

Shapes are dynamic (`dynamic=True`): one graph serves every batch size above one and every
length, so serving never waits on a recompile once the warm-up has compiled each head's graphs.
Inductor's caches (FX graphs, AOT autograd) live under `POOLSERVE_CACHE_DIR/inductor` (default
`~/.cache/poolserve/inductor`), so a restart of the same model and torch reuses the generated
kernels instead of compiling them again; a `TORCHINDUCTOR_CACHE_DIR` the user set wins.

`on` refuses to start where compiling cannot work at all (no C++ compiler for the CPU kernels);
`auto` then serves eagerly. Either way, an architecture that fails to compile is served eagerly,
with one log line.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import torch

from poolserve.config import CompileMode
from poolserve.errors import ModelLoadError
from poolserve.models import ModelSpec, PoolingModule

logger = logging.getLogger(__name__)


def cache_dir() -> Path:
    """Where poolserve keeps what it can reuse across restarts."""
    configured = os.environ.get("POOLSERVE_CACHE_DIR")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "poolserve"


def _cpu_compiler() -> str | None:
    for name in (os.environ.get("CXX"), "g++", "c++", "clang++"):
        if name and (found := shutil.which(name)):
            return found
    return None


def compile_module(
    module: PoolingModule, spec: ModelSpec, mode: CompileMode
) -> Callable[..., torch.Tensor] | None:
    """The compiled module, or None when `auto` finds that compiling cannot work here."""
    if spec.device.type == "cpu" and _cpu_compiler() is None:
        message = "torch.compile needs a C++ compiler (g++) for CPU kernels and none was found"
        if mode == "on":
            raise ModelLoadError(f"--compile on: {message}; install g++ or use --compile off")
        logger.info("%s; serving eagerly", message)
        return None
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_dir() / "inductor"))
    logger.info(
        "compiling %s with torch.compile (cache: %s); the first start takes a while",
        spec.name,
        os.environ["TORCHINDUCTOR_CACHE_DIR"],
    )
    compiled: Callable[..., torch.Tensor] = torch.compile(module, dynamic=True)
    return compiled
