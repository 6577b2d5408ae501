"""`--compile`: whether compiling can work here, and torch.compile for the models AOTInductor
cannot export (backends/torch/aot.py compiles the others ahead of time, cached on disk).

Shapes are dynamic (`dynamic=True`): one graph serves every batch size above one and every
length (a batch of one gets its own), so serving never waits on a recompile once the warm-up has
compiled them. Weights are frozen (constants, pre-packed for oneDNN on CPU). Inductor's caches
live under `POOLSERVE_CACHE_DIR/inductor` (default `~/.cache/poolserve/inductor`, set when
poolserve is imported; a `TORCHINDUCTOR_CACHE_DIR` the user set wins): a restart reuses the
compiled C++ kernels, but torch does not cache a graph that holds pre-packed oneDNN weights
("mkldnn tensors unpickleable"), so tracing and lowering run again on each start
(docs/benchmarks.md has both start-up times).

`on` refuses to start where compiling cannot work at all (no C++ compiler for the CPU kernels);
`auto` then serves eagerly, as it does on CUDA (where compiling has not been measured here).
Either way, an architecture that fails to compile is served eagerly, with one log line.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable, Sequence

import torch

from poolserve.backends.torch_model.executor import CompiledForward, TorchBatch, run_eagerly
from poolserve.backends.torch_model.module import PoolingModule
from poolserve.config import CompileMode
from poolserve.errors import SettingError
from poolserve.models.kinds import Head
from poolserve.models.spec import ModelSpec

logger = logging.getLogger(__name__)


def _cpu_compiler() -> str | None:
    for name in (os.environ.get("CXX"), "g++", "c++", "clang++"):
        if name and (found := shutil.which(name)):
            return found
    return None


def can_compile(spec: ModelSpec, mode: CompileMode) -> bool:
    """Whether `mode` compiles this model here: False (with a log line) where `auto` finds that
    compiling cannot work; `on` then refuses to start instead. On other devices than the CPU,
    only `on` compiles, with torch.compile."""
    if spec.layout.vision is not None:
        if mode == "on":
            raise SettingError(
                "--compile on: image-text models (CLIP, SigLIP) are not compiled here; use "
                "--compile auto (they then run eagerly) or off"
            )
        logger.info("%s: image-text models run eagerly (not compiled)", spec.name)
        return False
    if spec.device != "cpu":
        if mode == "on":  # torch.compile (not measured here)
            return True
        logger.info("--compile auto compiles on CPU only; serving eagerly on %s", spec.device)
        return False
    if _cpu_compiler() is None:
        message = "compiling needs a C++ compiler (g++) for CPU kernels and none was found"
        if mode == "on":
            raise SettingError(f"--compile on: {message}; install g++ or use --compile off")
        logger.info("%s; serving eagerly", message)
        return False
    return True


def compile_module(module: PoolingModule) -> Callable[..., torch.Tensor]:
    """The module through torch.compile (graphs are built lazily, at each shape's first call)."""
    # Freezing treats the weights as constants, which lets inductor pre-pack them for oneDNN:
    # measured on a 2-core AVX512-BF16 machine (all-MiniLM-L6-v2, bf16, one thread), one
    # sentence took 3.5 ms frozen, 5.8 ms compiled without freezing and 7.2 ms eager.
    # The C++ wrapper runs the whole graph with the GIL released (inductor's Python wrapper
    # calls its fused C++ kernels holding it), so runners and the event loop stop queueing
    # for the GIL behind each other: c=64 one-sentence requests went from 584 to 638 req/s.
    # Both are set on inductor's process-wide config: compilation happens lazily, at the first
    # call of each graph, and `torch.compile(options=...)` was measured not to enable freezing.
    import torch._inductor.config  # 1.2 s of imports: only where something is compiled

    torch._inductor.config.freezing = True
    torch._inductor.config.cpp_wrapper = True
    compiled: Callable[..., torch.Tensor] = torch.compile(module, dynamic=True)
    return compiled


def just_in_time(
    module: PoolingModule,
    name: str,
    head: Head,
    why: str,
    counts: Sequence[int],
    *,
    packed: bool,
    runners: int,
) -> CompiledForward | None:
    """The head through torch.compile at `counts` threads, for a model that does not export
    (`why`); None, with one log line, where torch.compile cannot serve it: packed batches, or
    several runners (an express runner counts)."""
    if packed:
        logger.info(
            "%s cannot be compiled ahead of time (%s); serving its packed batches eagerly",
            name,
            why,
        )
        return None
    if runners > 1:
        logger.info(
            "%s cannot be compiled ahead of time (%s); serving it eagerly with %d runners "
            "(torch.compile takes --runners 1 --no-express-runner)",
            name,
            why,
            runners,
        )
        return None
    if not counts:
        return None
    logger.info(
        "%s cannot be compiled ahead of time (%s); compiling it with torch.compile, "
        "which is not cached and runs again on every start",
        name,
        why,
    )
    jit = compile_module(module)

    def run(batch: TorchBatch) -> torch.Tensor:
        return run_eagerly(jit, batch)

    return CompiledForward(dict.fromkeys(counts, run), head)
