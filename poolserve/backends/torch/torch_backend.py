"""The PyTorch runtime (`--backend torch`): the loaded model (backends/torch_model/) run eagerly, or
its main head compiled where it pays (compile_gain.py): by AOTInductor, cached on disk (aot.py),
else torch.compile (jit.py)."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import replace

from poolserve._environment import cache_dir
from poolserve.backends.torch import aot, compile_gain
from poolserve.backends.torch.aot import AotRun
from poolserve.backends.torch.aot_runtime import AotUnavailableError
from poolserve.backends.torch.cached_start import StartSettings, cached_start
from poolserve.backends.torch.jit import can_compile, just_in_time
from poolserve.backends.torch_model import precision
from poolserve.backends.torch_model.device import place
from poolserve.backends.torch_model.executor import CompiledForward, ModelExecutor
from poolserve.backends.torch_model.forward_cache import ForwardTarget
from poolserve.backends.torch_model.image_text import ImageTextModule
from poolserve.backends.torch_model.loaded_model import LoadedModel, RunnerSeats
from poolserve.backends.torch_model.loader import log_packed
from poolserve.backends.torch_model.module import PoolingModule
from poolserve.config import CompileMode, EngineConfig
from poolserve.config.model_config import PackingMode
from poolserve.engine.model_backend import (
    BackendFactory,
    Collate,
    CompileReport,
    Forward,
    PrecisionReport,
    QuantizationReport,
    RuntimeChoice,
)
from poolserve.engine.runner_layout import concurrent_forwards, runner_layout
from poolserve.errors import SettingError
from poolserve.models.kinds import Head
from poolserve.models.spec import ModelSpec

logger = logging.getLogger(__name__)


def make_backend(model: ModelSpec, config: EngineConfig, collate: Collate) -> TorchBackend:
    """The torch backend of `model`, placed (its device and dtype chosen) and laid out as the
    engine's runners are; a setting that cannot work here is refused now, before any load."""
    if config.quantize != "off":
        raise SettingError(
            f"--quantize {config.quantize} runs on onnxruntime or openvino, not --backend "
            "torch: pass --backend auto (the faster of them, measured) or name one"
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
        callers=concurrent_forwards(config, placed),
        max_batch_size=min(config.max_batch_size, config.max_batch_tokens),
        packing=config.packing,
        batch_invariant=config.batch_invariant,
    )


class TorchBackend:
    """The loaded model run eagerly (batch-invariant: torch_model/batch_invariant.py), or with
    `compile` on/auto its main head compiled (other heads stay eager) for the thread counts a
    runner uses (1 for small batches, `threads`, every runner's on lent cores) where it pays
    (compile_gain.py); other counts run eagerly. Ahead of time (AOTInductor) first: a library
    per thread count, cached on disk, which `runners` threads may run at once. Where the model
    does not export, torch.compile with one runner (its guards misfire when several threads
    call it, pytorch/pytorch#123177: a recompile mid-serving stalled every runner ~15 s)."""

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
        callers: int | None = None,
        max_batch_size: int = 256,
        packing: PackingMode = "auto",
        batch_invariant: bool = False,
    ) -> None:
        seats = RunnerSeats(
            runners=runners,
            threads=threads,
            runner_threads=runner_threads,
            callers=callers or runners,
            single_thread_tokens=single_thread_tokens,
            max_batch_size=max_batch_size,
        )
        self._model = LoadedModel(
            place(spec), collate, seats, packing=packing, batch_invariant=batch_invariant
        )
        # Whether the main head is compiled: `on` that cannot work here refuses to start.
        self._compiles = compile != "off" and can_compile(self._model.spec, compile)
        self._compile = compile
        # The main head's compiled forwards, padded or packed.
        self._compiled: tuple[CompiledForward, ...] = ()
        self.report = CompileReport("eager")
        # The compiled forward's measured gain over eager, by thread count (compile_gain.py).
        self._known_gains: dict[int, compile_gain.Gain] = {}
        self.quantization: QuantizationReport | None = None  # nothing quantized here
        self.choice: RuntimeChoice | None = None  # the runtime was named, not chosen here
        # Set by `poolserve compile`: with --compile auto, build what the cache lacks and
        # measure it (a start only loads it: compile_gain.not_compiled_line).
        self.ahead_of_time = False

    @property
    def spec(self) -> ModelSpec:
        """The model as placed here (engine/model_backend.py)."""
        return self._model.spec

    @property
    def packed_heads(self) -> frozenset[Head]:
        return self._model.packed_heads

    @property
    def precision(self) -> PrecisionReport | None:
        return self._model.precision

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

    @property
    def _builds(self) -> bool:
        """Whether what the cache lacks is compiled now: `on`, or auto in `poolserve compile`."""
        return self._compile == "on" or (self._compile == "auto" and self.ahead_of_time)

    def load(self) -> None:
        self._model.own_threads()
        if self._restart_from_the_cache():
            return
        self._speed_up(self._model.load())

    def _restart_from_the_cache(self) -> bool:
        """Serve the main head from the compiled libraries alone where the caches hold all
        that a start decides for it (cached_start.py); its eager module is built at its first
        call (torch_model/deferred_module.py)."""
        model = self._model
        spec, seats = model.spec, model.seats
        if not self._compiles or spec.device != "cpu" or spec.layout.vision is not None:
            return False
        started = time.perf_counter()
        settings = StartSettings(
            seats.threads, seats.runners, seats.max_batch_size, model.packing, self._compile
        )
        found = cached_start(cache_dir(), spec, settings, seats.callers)
        if found is None:
            return False
        model.spec, model.precision, self._known_gains = found.spec, found.precision, found.gains
        if found.precision is not None:
            logger.info(precision.describe(found.spec.name, found.precision))
        packed = frozenset(found.spec.heads if found.forward.packed else ())
        if packed:
            log_packed(found.spec, packed)
        model.defer(packed)
        self._compiled = (found.forward,)
        self.report = CompileReport("cached", gains=self._gain_ratios())
        self._warm_up(self._new_executor(), heads=(found.forward.head,))
        self.report = replace(self.report, seconds=time.perf_counter() - started)
        logger.info(compile_gain.compiled_line(self.spec.name, self.report, self.compiled_threads))
        return True

    def _speed_up(self, module: PoolingModule | ImageTextModule) -> None:
        """Compile the main head where `compile` asks for it and (auto, cached) where it is
        measured to pay."""
        if not self._compiles:
            return
        assert isinstance(module, PoolingModule)  # an image-text model is not compiled
        started = time.perf_counter()
        name = self.spec.name
        head = self.spec.heads[0]
        counts = self._counts_worth_compiling(head)
        if not counts:
            self.report = CompileReport("eager", gains=self._gain_ratios())
            logger.info(
                compile_gain.describe(name, self._known_gains, "as measured at an earlier start")
            )
            return
        compiled: CompiledForward | None
        try:
            compiled = self._compile_ahead_of_time(module, head, counts)
        except aot.NotInCacheError:
            logger.info(compile_gain.not_compiled_line(name))
            return
        except AotUnavailableError as exc:
            if not self._builds:
                logger.info("%s: running it eagerly (%s)", name, exc)
                return
            compiled = self._compile_just_in_time(module, head, str(exc), counts)
        except Exception as exc:
            logger.warning("%s: compiling ahead of time failed (%r); serving it eagerly", name, exc)
            return
        if compiled is None:
            return
        self._compiled = (compiled,)
        try:
            # Run every graph serving will need now (torch.compile builds a graph for a batch
            # of one and one for more, at each thread count), so no request waits on a compile.
            self._warm_up(self._new_executor(), heads=(head,))
            if self._compile != "on":
                self._keep_what_pays(compiled)
        except Exception as exc:
            logger.warning("compiling %s failed (%r); serving it eagerly", name, exc)
            self.close()
            self.report = CompileReport("eager")
            return
        if not self._compiled:
            return
        self.report = replace(
            self.report, seconds=time.perf_counter() - started, gains=self._gain_ratios()
        )
        logger.info(compile_gain.compiled_line(name, self.report, self.compiled_threads))

    def _gain_ratios(self) -> dict[int, float]:
        return {threads: gain.ratio for threads, gain in self._known_gains.items()}

    def _targets(self, head: Head, counts: Sequence[int]) -> list[ForwardTarget]:
        """What the main head is compiled for at each of `counts` threads."""
        module = self._model.module
        assert isinstance(module, PoolingModule)
        with_types = self.spec.kind == "cross_encoder" and module.takes_token_types
        packed = head in self.packed_heads
        size = self._model.seats.max_batch_size
        return [ForwardTarget(head, threads, with_types, size, packed) for threads in counts]

    def _counts_worth_compiling(self, head: Head) -> list[int]:
        """The thread counts a runner runs at (RunnerSeats.thread_counts), less those an
        earlier start measured not to pay (`--compile on`: all of them)."""
        counts = self._model.seats.thread_counts
        if self._compile == "on":
            return counts
        for target in self._targets(head, counts):
            gain = compile_gain.cached_gain(compile_gain.gain_file(cache_dir(), self.spec, target))
            if gain is not None:
                self._known_gains[target.threads] = gain
        known = self._known_gains
        return [count for count in counts if count not in known or known[count].pays]

    def _keep_what_pays(self, compiled: CompiledForward) -> None:
        """Measure the compiled forward where no earlier start did, and drop the thread counts
        where it does not pay."""
        counts = sorted(set(compiled.runs) - set(self._known_gains))
        unmeasured = self._targets(compiled.head, counts)
        if unmeasured:
            self._known_gains.update(
                compile_gain.measure_targets(
                    cache_dir(),
                    self.spec,
                    self._model.collate,
                    unmeasured,
                    eager=self._new_executor(compiled=()),
                    compiled=self._new_executor(),
                )
            )
        kept = compile_gain.paying(compiled, self._known_gains)
        self._compiled = () if kept is None else (kept,)
        if kept is None:
            self.report = CompileReport("eager", gains=self._gain_ratios())

    def _compile_ahead_of_time(
        self, module: PoolingModule, head: Head, counts: Sequence[int]
    ) -> CompiledForward:
        if self.spec.device != "cpu":
            raise AotUnavailableError("ahead-of-time compiling is for the CPU only")
        targets = self._targets(head, counts)
        source = module if self._builds else None
        callers = self._model.seats.callers
        loaded = aot.load_or_build(cache_dir(), source, self.spec, targets, callers)
        self.report = CompileReport("built" if loaded.built else "cached")
        with_types = targets[0].with_token_types
        return CompiledForward(
            {threads: AotRun(model, with_types) for threads, model in loaded.runs.items()},
            head,
            targets[0].packed,
        )

    def _compile_just_in_time(
        self, module: PoolingModule, head: Head, why: str, counts: Sequence[int]
    ) -> CompiledForward | None:
        # torch.compile's kernels take the thread count of each call: only the runner's own
        # counts run it (a batch on borrowed cores runs eagerly).
        seats = self._model.seats
        mine = sorted(set(counts) & {1, seats.threads})
        packed = head in self.packed_heads
        compiled = just_in_time(
            module, self.spec.name, head, why, mine, packed=packed, runners=seats.callers
        )
        if compiled is not None:
            self.report = CompileReport("jit")
        return compiled

    def executor(self) -> Forward:
        source = "compiled" if self._compiled else "eager"
        jit = self.report.source == "jit"
        return self._model.runner_executor(self._compiled, source, every_shape=jit)

    def _new_executor(self, compiled: Sequence[CompiledForward] | None = None) -> ModelExecutor:
        return self._model.executor(self._compiled if compiled is None else compiled)

    def close(self) -> None:
        """Free the compiled libraries' model instances (their weights)."""
        for run in (run for each in self._compiled for run in each.runs.values()):
            close = getattr(run, "close", None)
            if close is not None:
                close()
        self._compiled = ()

    def _warm_up(self, executor: ModelExecutor, heads: Sequence[Head]) -> None:
        counts = sorted({1, self._model.seats.threads, *self.compiled_threads})
        self._model.warm_up(executor, heads, counts, every_shape=self.report.source == "jit")


# The backend seam, checked by the type checker: this module's factory builds a `Backend`.
_FACTORY: BackendFactory = make_backend
