"""The PyTorch backend (`--backend torch`): eager PyTorch or, with `compile`, the main head
compiled: ahead of time by AOTInductor, from the on-disk cache when an earlier start (or `poolserve
compile`) built it (backends/torch/aot.py), else by torch.compile where the model does not export
(backends/torch/jit.py). At load it also decides, by checking the loaded model, which heads run
packed batches (backends/torch/packing.py); the engine collates those heads' batches packed.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

import torch

from poolserve._environment import cache_dir
from poolserve.backends.torch import aot, precision
from poolserve.backends.torch.aot_cache import AotTarget
from poolserve.backends.torch.aot_runtime import AotModel, AotUnavailableError
from poolserve.backends.torch.device import place
from poolserve.backends.torch.executor import (
    CompiledForward,
    ModelExecutor,
    TorchBatch,
    run_eagerly,
    use_threads,
)
from poolserve.backends.torch.image_text import ImageTextModule
from poolserve.backends.torch.jit import can_compile, compile_module
from poolserve.backends.torch.loader import enable_packing, load_module
from poolserve.backends.torch.module import PoolingModule
from poolserve.config import CompileMode, EngineConfig
from poolserve.config.model_config import PackingMode
from poolserve.engine.collate import text_item
from poolserve.engine.model_backend import (
    BackendFactory,
    Collate,
    CompileReport,
    Forward,
    PrecisionReport,
    QuantizationReport,
)
from poolserve.engine.runner_layout import runner_layout
from poolserve.engine.work import RequestGroup, WorkItem
from poolserve.errors import SettingError
from poolserve.inputs.image_processor import blank_image
from poolserve.inputs.tokenizer import TextTokenizer
from poolserve.models.kinds import Head
from poolserve.models.spec import ModelSpec

logger = logging.getLogger(__name__)

WARM_UP_TEXT = "a longer sentence to warm up the model with " * 40


def make_backend(model: ModelSpec, config: EngineConfig, collate: Collate) -> TorchBackend:
    """The torch backend of `model`, placed (its device and dtype chosen) and laid out as the
    engine's runners are; a setting that cannot work here is refused now, before any load."""
    if config.quantize != "off":
        raise SettingError(
            f"--quantize {config.quantize} runs on onnxruntime, not --backend torch: leave "
            "--backend out (auto) or pass --backend onnxruntime"
        )
    placed = place(model)
    runners, threads = runner_layout(config, placed.device)
    return TorchBackend(
        placed,
        collate,
        single_thread_tokens=config.single_thread_tokens,
        threads=threads or 1,
        runner_threads=threads,
        compile=config.compile,
        runners=runners,
        max_batch_size=min(config.max_batch_size, config.max_batch_tokens),
        packing=config.packing,
    )


class TorchBackend:
    """Eager PyTorch, or with `compile` on/auto the model's main head compiled (its other heads,
    such as an embedding model's `token_embed`, stay eager: they are rare, and each compiled
    head costs start-up time), for the thread counts a runner uses (1 for small batches,
    `threads`, and every runner's threads for a large batch on cores lent by all the idle
    runners); a batch at any other count runs eagerly, since the compiled kernels fix their
    thread count.

    Ahead of time (AOTInductor) first: one library per thread count, cached on disk, which
    `runners` threads may run at once. Where the model does not export, torch.compile with one
    runner (its guards misfire when several threads call it, pytorch/pytorch#123177: measured
    here, a graph recompiled mid-serving and stalled every runner for about 15 s), else eager."""

    # What runs the main head where `load` found something faster than eager torch.
    FASTER_FORWARD = "compiled"

    def __init__(
        self,
        spec: ModelSpec,
        collate: Collate,
        *,
        single_thread_tokens: int,
        threads: int = 1,
        runner_threads: int | None = None,
        compile: CompileMode = "off",
        runners: int = 1,
        max_batch_size: int = 256,
        packing: PackingMode = "auto",
    ) -> None:
        self._spec = place(spec)
        self._collate = collate
        # Whether the main head is compiled: `on` that cannot work here refuses to start.
        self._compiles = compile != "off" and can_compile(self._spec, compile)
        self._single_thread_tokens = single_thread_tokens
        self._threads = threads
        # Each runner thread's intra-op threads, set before its first operator (None: torch's
        # default, on CUDA): torch keeps the count per thread.
        self._runner_threads = runner_threads
        self._compile = compile
        self._runners = runners
        self._max_batch_size = max_batch_size
        self._packing = packing
        # The heads whose batches are packed (set by `load`).
        self.packed_heads: frozenset[Head] = frozenset()
        self._module: Callable[..., torch.Tensor] | None = None
        # The main head's faster forwards (compiled, or another runtime's), padded or packed.
        self._compiled: tuple[CompiledForward, ...] = ()
        self.report = CompileReport("eager")
        # How `--dtype auto` chose the precision (set by `load` where it measured).
        self.precision: PrecisionReport | None = None
        # The quality gate of a quantized model (the torch backend quantizes nothing).
        self.quantization: QuantizationReport | None = None

    @property
    def spec(self) -> ModelSpec:
        """The model as placed here (engine/model_backend.py)."""
        return self._spec

    @property
    def compile_mode(self) -> CompileMode:
        return self._compile

    @property
    def compiled(self) -> bool:
        """True once `load` has compiled (and warmed) the main head's graphs."""
        return bool(self._compiled)

    @property
    def compiled_threads(self) -> tuple[int, ...]:
        """The intra-op thread counts the main head runs compiled at (others run eagerly)."""
        return tuple(sorted({count for each in self._compiled for count in each.runs}))

    def _own_threads(self) -> None:
        if self._runner_threads is not None:
            use_threads(self._runner_threads)

    def load(self) -> None:
        self._own_threads()
        module = self._load_module()
        self._module = module
        self._choose_packing(module)
        self._speed_up(module)

    def _speed_up(self, module: PoolingModule | ImageTextModule) -> None:
        """Compile the main head where `compile` asks for it (another backend built on this one
        runs it in its own runtime instead)."""
        if not self._compiles:
            return
        assert isinstance(module, PoolingModule)  # an image-text model is not compiled
        started = time.perf_counter()
        head = self._spec.heads[0]
        compiled: CompiledForward | None
        try:
            compiled = self._compile_ahead_of_time(module, head)
        except aot.NotInCacheError:
            logger.info(
                "%s: no compiled forward in the cache for these settings; running it eagerly "
                "(`poolserve compile` with the same flags fills the cache)",
                self._spec.name,
            )
            return
        except AotUnavailableError as exc:
            if self._compile == "cached":
                logger.info("%s: running it eagerly (%s)", self._spec.name, exc)
                return
            compiled = self._compile_just_in_time(module, head, str(exc))
        except Exception as exc:
            logger.warning(
                "%s: compiling ahead of time failed (%r); serving it eagerly", self._spec.name, exc
            )
            return
        if compiled is None:
            return
        self._compiled = (compiled,)
        try:
            # Run every graph serving will need now (torch.compile builds a graph for a batch
            # of one and one for more, at each thread count), so no request waits on a compile.
            self._warm_up(self._new_executor(), heads=(head,))
        except Exception as exc:
            logger.warning("compiling %s failed (%r); serving it eagerly", self._spec.name, exc)
            self.close()
            self.report = CompileReport("eager")
            return
        self.report = replace(self.report, seconds=time.perf_counter() - started)
        logger.info(
            "%s: %s and warmed up in %.1f s (thread counts %s)",
            self._spec.name,
            {
                "built": "compiled ahead of time",
                "cached": "compiled forward loaded from the cache",
                "jit": "compiled with torch.compile",
            }[self.report.source],
            self.report.seconds,
            ", ".join(map(str, self.compiled_threads)),
        )

    def _load_module(self) -> PoolingModule | ImageTextModule:
        """The module in the precision asked for, or (`auto` on a CPU with several fast
        precisions) in the one measured fastest on this machine, its spec told."""
        if self._spec.dtype != "auto":
            return load_module(self._spec)
        spec = self._spec
        module, self.precision = precision.from_cache_or_measure(
            cache_dir(),
            spec,
            lambda dtype: load_module(replace(spec, dtype=dtype)),
            self._collate,
            self._threads,
        )
        self._spec = replace(spec, dtype=self.precision.dtype)
        return module

    def _choose_packing(self, module: PoolingModule | ImageTextModule) -> None:
        if self._packing == "off":
            logger.info("%s: padded batches in length buckets (--packing off)", self._spec.name)
            return
        why = enable_packing(module, self._spec)
        self.packed_heads = frozenset(head for head in self._spec.heads if module.packs(head))
        if why is not None:
            logger.info(
                "%s: padded batches in length buckets: it cannot run packed batches (%s)",
                self._spec.name,
                why,
            )
            return
        padded = sorted(set(self._spec.heads) - self.packed_heads)
        logger.info(
            "%s: packed batches (several inputs to a row, no padding to the longest)%s",
            self._spec.name,
            f"; {', '.join(padded)} in padded length buckets" if padded else "",
        )

    def _compile_ahead_of_time(self, module: PoolingModule, head: Head) -> CompiledForward:
        if self._spec.device != "cpu":
            raise AotUnavailableError("ahead-of-time compiling is for the CPU only")
        with_types = self._spec.kind == "cross_encoder" and module.takes_token_types
        # One thread for small batches, the runner's own threads, and every runner's for a
        # large batch that borrows the idle runners' cores.
        thread_counts = sorted({1, self._threads, self._threads * self._runners})
        packed = head in self.packed_heads
        targets = [
            AotTarget(head, threads, with_types, self._max_batch_size, packed)
            for threads in thread_counts
        ]
        loaded = aot.load_or_build(
            cache_dir(),
            module,
            self._spec,
            targets,
            self._runners,
            build_missing=self._compile != "cached",
        )
        self.report = CompileReport("built" if loaded.built else "cached")
        return CompiledForward(
            {threads: _AotRun(model, with_types) for threads, model in loaded.runs.items()},
            head,
            packed,
        )

    def _compile_just_in_time(
        self, module: PoolingModule, head: Head, why: str
    ) -> CompiledForward | None:
        if head in self.packed_heads:
            logger.info(
                "%s cannot be compiled ahead of time (%s); serving its packed batches eagerly",
                self._spec.name,
                why,
            )
            return None
        if self._runners > 1:
            logger.info(
                "%s cannot be compiled ahead of time (%s); serving it eagerly with %d runners "
                "(torch.compile takes --runners 1)",
                self._spec.name,
                why,
                self._runners,
            )
            return None
        logger.info(
            "%s cannot be compiled ahead of time (%s); compiling it with torch.compile, "
            "which is not cached and runs again on every start",
            self._spec.name,
            why,
        )
        jit = compile_module(module)
        self.report = CompileReport("jit")

        def run(batch: TorchBatch) -> torch.Tensor:
            return run_eagerly(jit, batch)

        return CompiledForward({1: run, self._threads: run}, head)

    def executor(self) -> Forward:
        self._own_threads()
        started = time.perf_counter()
        executor = self._new_executor()
        self._warm_up(executor, heads=self._spec.heads)
        logger.info(
            "%s: a runner warmed up in %.1f s (%s)",
            self._spec.name,
            time.perf_counter() - started,
            self.FASTER_FORWARD if self._compiled else "eager",
        )
        return executor

    def _new_executor(self) -> ModelExecutor:
        if self._module is None:
            raise RuntimeError("TorchBackend.executor() before load()")
        device = torch.device(self._spec.device)
        return ModelExecutor(self._module, device, self._single_thread_tokens, self._compiled)

    def close(self) -> None:
        """Free the compiled libraries' model instances (their weights)."""
        for run in (run for each in self._compiled for run in each.runs.values()):
            close = getattr(run, "close", None)
            if close is not None:
                close()
        self._compiled = ()

    def _warm_up(self, executor: ModelExecutor, heads: Sequence[Head]) -> None:
        """Run batches of one and of eight, short and long, at each thread count the runner
        uses on its own; for a cross-encoder also with token type ids (its query-document
        pairs carry them, single texts do not, and torch.compile builds a graph for each)."""
        tokenizer = TextTokenizer(self._spec.tokenizer)
        longest = self._spec.max_model_len
        short, long = tokenizer.encode_batch(["warm up", WARM_UP_TEXT], truncate_to=longest)
        typed = (False, True) if self._spec.kind == "cross_encoder" else (False,)
        for head in heads:
            if head == "image_embed":
                self._warm_up_images(executor)
                continue
            for threads in sorted({1, self._threads, *self.compiled_threads}):
                sizes = (1, min(8, self._max_batch_size))
                for ids, with_types, size in itertools.product((short, long), typed, sizes):
                    types = [0] * len(ids) if with_types else None
                    item = text_item(RequestGroup(size), 0, ids, types, head=head)
                    batch = self._collate([item] * size, head in self.packed_heads)
                    if executor.threads_for(batch, threads) == threads:
                        executor(batch, threads)

    def _warm_up_images(self, executor: ModelExecutor) -> None:
        """A batch of one image and one of eight, on one thread and on the runner's."""
        vision = self._spec.layout.vision
        assert vision is not None
        image = blank_image(vision)
        for threads in sorted({1, self._threads}):
            for size in (1, min(8, self._max_batch_size)):
                item = WorkItem.of(RequestGroup(size), 0, image)
                batch = self._collate([item] * size, False)
                if executor.threads_for(batch, threads) == threads:
                    executor(batch, threads)


class _AotRun:
    """A compiled library as a `CompiledRun`: a model compiled with token type ids gets zeros
    where a batch has none (what the backbone assumes without them)."""

    def __init__(self, model: AotModel, with_types: bool) -> None:
        self._model = model
        self._with_types = with_types

    def __call__(self, batch: TorchBatch) -> torch.Tensor:
        packed = batch.packed
        inputs: tuple[torch.Tensor, ...] = (
            (batch.input_ids, batch.attention_mask)
            if packed is None
            else (batch.input_ids, *packed)
        )
        if self._with_types:
            types = batch.token_type_ids
            inputs += (torch.zeros_like(batch.input_ids) if types is None else types,)
        return self._model(*inputs)

    def close(self) -> None:
        self._model.close()


# The engine's seam, checked by the type checker: this module's factory builds a `Backend`.
_FACTORY: BackendFactory = make_backend
