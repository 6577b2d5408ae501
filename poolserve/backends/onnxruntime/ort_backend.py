"""The ONNX Runtime backend (`--backend onnxruntime`): the main head's forward exported to ONNX
at first start (onnx_export.py, kept in the cache) and run by ONNX Runtime, in padded batches cut
into length buckets; with `--quantize int8`, in int8 (int8.py) behind the quality gate
(backends/quality_gate.py).

Padded, not packed: the packed graph exports (the segment mask and positions are its inputs,
and it answers as the torch backend does), but ONNX Runtime runs it slower than length buckets,
whose padding is small: measured on all-MiniLM-L6-v2, 2,000 real sentences through
`Engine.embed` on 2 cores, int8 505 sentences/s packed against 745 padded, float32 365 against
457.

It is built on the torch backend: the model is loaded in torch, which is what is exported, the
float32 reference the gate checks against, and what runs the model's other heads (an embedding
model's token vectors), which are rare. Text models on the CPU, in float32 or int8.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnxruntime
import torch

from poolserve._environment import cache_dir
from poolserve.backends import quality_gate
from poolserve.backends.onnxruntime.int8_cache import ORT_INT8, Quantizer, int8_graphs
from poolserve.backends.onnxruntime.onnx_export import (
    entry_of,
    exported,
    graph_inputs,
    valid_model,
)
from poolserve.backends.probe import calibration_split
from poolserve.backends.torch.aot_cache import AotTarget
from poolserve.backends.torch.deferred_module import deferred_module
from poolserve.backends.torch.device import cpu_precisions, native_features, place
from poolserve.backends.torch.executor import (
    CompiledForward,
    CompiledRun,
    ModelExecutor,
    TorchBatch,
)
from poolserve.backends.torch.image_text import ImageTextModule
from poolserve.backends.torch.module import PoolingModule
from poolserve.backends.torch.precision import probe_batches
from poolserve.backends.torch.torch_backend import TorchBackend
from poolserve.config import EngineConfig
from poolserve.config.engine_table import ENGINE_BY_NAME
from poolserve.config.model_config import Quantize, QuantizeGate
from poolserve.engine.collate import Batch
from poolserve.engine.model_backend import (
    BackendFactory,
    Collate,
    CompileReport,
    CompileSource,
    QuantizationReport,
)
from poolserve.engine.runner_layout import concurrent_forwards, runner_layout
from poolserve.errors import ModelLoadError, SettingError
from poolserve.models.spec import ModelSpec

logger = logging.getLogger(__name__)


def make_backend(model: ModelSpec, config: EngineConfig, collate: Collate) -> OrtBackend:
    """The ONNX Runtime backend of `model`; a setting it cannot honour is refused now."""
    return graph_backend(OrtBackend, "onnxruntime", model, config, collate)


def graph_backend(
    kind: type[OrtBackend], name: str, model: ModelSpec, config: EngineConfig, collate: Collate
) -> OrtBackend:
    """A backend that runs the main head's exported graph (`kind`, `--backend name`) on the CPU
    in a precision the engine runs (config/engine_table.py) or int8; a setting it cannot honour
    is refused now."""
    if model.layout.vision is not None:
        raise SettingError(f"--backend {name} serves text models; use --backend torch")
    precision = "float32" if model.dtype == "auto" else model.dtype
    precisions = ENGINE_BY_NAME[name].precisions
    if precision not in precisions:
        raise SettingError(
            f"--backend {name} runs {' or '.join(precisions)} (or int8 with --quantize "
            f"int8), not --dtype {model.dtype}; leave --dtype out or use --backend torch"
        )
    if precision != "float32" and precision not in cpu_precisions():
        raise SettingError(
            f"--backend {name} --dtype {precision} needs a CPU that runs it natively "
            f"({native_features(precision)}); this one runs float32: leave --dtype out"
        )
    if config.quantize != "off" and precision != "float32":
        raise SettingError(
            f"--quantize {config.quantize} quantizes the float32 graph: leave --dtype out"
        )
    if config.compile == "on":
        raise SettingError(f"--compile on is the torch backend's; {name} optimizes its own graph")
    # The torch module is loaded in float32 whatever the runtime runs: it is what is exported
    # and the reference the int8 gate checks against.
    placed = place(replace(model, dtype="float32"))
    if placed.device != "cpu":
        raise SettingError(f"--backend {name} runs on the CPU; use --backend torch for CUDA")
    runners, threads = runner_layout(config, placed.device)
    return kind(
        placed,
        collate,
        single_thread_tokens=config.single_thread_tokens,
        threads=threads or 1,
        runner_threads=threads,
        runners=runners,
        callers=concurrent_forwards(config, placed),
        max_batch_size=min(config.max_batch_size, config.max_batch_tokens),
        quantize=config.quantize,
        gate=config.quantize_gate,
        precision=precision,
    )


class OrtBackend(TorchBackend):
    """The torch backend with its main head run by ONNX Runtime, one session per thread count a
    runner uses (1, its own, and every runner's for a batch on lent cores)."""

    FASTER_FORWARD: CompileSource = "onnxruntime"
    # How the log names the runtime.
    RUNTIME = "ONNX Runtime"
    # How its int8 graphs are made (int8_cache.py).
    QUANTIZER: Quantizer = ORT_INT8

    def __init__(
        self,
        spec: ModelSpec,
        collate: Collate,
        *,
        single_thread_tokens: int,
        threads: int,
        runner_threads: int | None,
        runners: int,
        max_batch_size: int,
        quantize: Quantize,
        callers: int | None = None,
        gate: QuantizeGate,
        precision: str = "float32",
    ) -> None:
        super().__init__(
            spec,
            collate,
            single_thread_tokens=single_thread_tokens,
            threads=threads,
            runner_threads=runner_threads,
            compile="off",
            runners=runners,
            callers=callers,
            max_batch_size=max_batch_size,
            packing="off",
        )
        self._quantize = quantize
        self._gate = gate
        # What the runtime computes in (the torch module stays float32).
        self._precision = precision

    @property
    def spec(self) -> ModelSpec:
        """The model as placed here, in the precision the runtime runs it in."""
        return replace(self._spec, dtype=self._precision)

    def _restart_from_the_cache(self) -> bool:
        """Serve the main head from its float32 graph alone where the cache holds it (the
        runtime holds the weights): the torch module is built at its first call, for another
        head (a restart then skips transformers' model code and the weights). int8 is not
        restarted so: its gate's figures come with the quantized graph, read at load."""
        if self._quantize != "off":
            return False
        spec, root = self._spec, cache_dir()
        for with_types in (True, False) if spec.kind == "cross_encoder" else (False,):
            target = AotTarget(
                spec.heads[0], 0, with_types, self._max_batch_size, with_pool_mask=True
            )
            graph = valid_model(entry_of(root, spec, target)[0])
            if graph is None:
                continue
            self._module = deferred_module(spec, "off", frozenset())
            self._compiled = (self._forward(target, graph),)
            self.report = CompileReport(self.FASTER_FORWARD)
            self._log_runtime(target.head)
            return True
        return False

    def _choose_packing(self, module: PoolingModule | ImageTextModule) -> None:
        """Padded batches, always (see above): said in `_speed_up`'s line."""

    def _speed_up(self, module: PoolingModule | ImageTextModule) -> None:
        assert isinstance(module, PoolingModule)  # image-text models are refused at start
        spec = self._spec
        head = spec.heads[0]
        with_types = spec.kind == "cross_encoder" and module.takes_token_types
        # Thread count 0: a graph is the same for every count (each session sets its own).
        targets = [AotTarget(head, 0, with_types, self._max_batch_size, with_pool_mask=True)]
        root = cache_dir()
        graphs = {target: exported(root, module, spec, target) for target in targets}
        if self._quantize == "int8":
            graphs = self._quantized(module, targets, graphs)
        self._compiled = tuple(self._forward(target, graphs[target]) for target in targets)
        self.report = CompileReport(self.FASTER_FORWARD)
        self._log_runtime(head)

    def _log_runtime(self, head: str) -> None:
        logger.info(
            "%s: the %s head runs on %s (%s, %s)",
            self._spec.name,
            head,
            self.RUNTIME,
            "int8" if self.quantization and self.quantization.served == "int8" else self._precision,
            "padded batches in length buckets",
        )

    def _forward(
        self, target: AotTarget, graph: Path, counts: Sequence[int] | None = None
    ) -> CompiledForward:
        """Sessions of `graph` at `counts` threads (default: each count a runner uses)."""
        counts = counts or sorted({1, self._threads, self._threads * self._runners})
        return CompiledForward(
            {count: self._run(graph, target, count) for count in counts},
            target.head,
            packed=target.packed,
            takes_pool_mask=not target.packed,
        )

    def _run(self, graph: Path, target: AotTarget, threads: int) -> CompiledRun:
        """`graph` run at `threads` intra-op threads."""
        return OrtRun(graph, target, threads)

    def _quantized(
        self, module: PoolingModule, targets: list[AotTarget], graphs: dict[AotTarget, Path]
    ) -> dict[AotTarget, Path]:
        """The int8 graphs where they pass the gate, else (fallback) the float32 ones."""
        started = time.perf_counter()
        head = targets[0].head
        calibrate_on, check_on = calibration_split()

        def batches(texts: tuple[str, ...]) -> dict[AotTarget, list[Batch]]:
            return {
                t: probe_batches(self._spec, self._collate, packed=t.packed, texts=texts)
                for t in targets
            }

        # Measured only where a graph is built (a restart reads the figures from the cache).
        checks = functools.cache(lambda: batches(check_on))
        reference = ModelExecutor(module, torch.device("cpu"), 0)

        @functools.cache
        def expected(target: AotTarget) -> list[np.ndarray]:
            return _outputs(reference, checks()[target], self._threads)

        def measure(target: AotTarget, graph: Path) -> dict[str, float]:
            forward = self._forward(target, graph, (self._threads,))
            run = ModelExecutor(module, torch.device("cpu"), 0, (forward,))
            got = _outputs(run, checks()[target], self._threads)
            return quality_gate.figures(head, expected(target), got)

        quantized, figures = int8_graphs(
            cache_dir(),
            self._spec,
            targets,
            graphs,
            lambda: batches(calibrate_on),
            measure,
            self.QUANTIZER,
        )
        failures = quality_gate.failures(figures)
        served = "int8" if not failures else "float32"
        self.quantization = QuantizationReport(
            "int8", served, figures, failures, time.perf_counter() - started
        )
        described = ", ".join(f"{name} {value:.4f}" for name, value in figures.items())
        if not failures:
            logger.info("%s: int8 passes the quality gate (%s)", self._spec.name, described)
            return quantized
        why = "; ".join(failures)
        if self._gate == "refuse":
            raise ModelLoadError(
                f"{self._spec.name}: int8 fails the quality gate against float32 ({why}); serve "
                "it unquantized (leave --quantize out) or with --quantize-gate fallback"
            )
        logger.warning(
            "%s: int8 fails the quality gate (%s); serving float32 (--quantize-gate fallback)",
            self._spec.name,
            why,
        )
        return graphs


def _outputs(executor: ModelExecutor, batches: Sequence[Batch], threads: int) -> list[np.ndarray]:
    return [output for batch in batches for output in executor(batch, threads)]


class OrtRun:
    """One ONNX Runtime session of a graph at one intra-op thread count, as a `CompiledRun`."""

    def __init__(self, graph: Path, target: AotTarget, threads: int) -> None:
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        # Waiting threads sleep, as torch's do here (poolserve/_environment.py): spinning would
        # take the cores the other runners and the tokenizers need.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._session = onnxruntime.InferenceSession(
            str(graph), options, providers=["CPUExecutionProvider"]
        )
        self._target = target
        self._names = [each.name for each in self._session.get_inputs()]

    def __call__(self, batch: TorchBatch) -> torch.Tensor:
        inputs = dict(zip(self._names, graph_inputs(batch, self._target), strict=True))
        return torch.from_numpy(self._session.run(None, inputs)[0])


# The engine's seam, checked by the type checker: this module's factory builds a `Backend`.
_FACTORY: BackendFactory = make_backend
