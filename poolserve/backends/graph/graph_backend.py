"""A backend that runs the main head's exported graph on a graph runtime (ONNX Runtime in
backends/onnxruntime/, OpenVINO in backends/openvino/): the graph exported to ONNX at first start
(onnx_export.py, kept in the cache), in padded batches cut into length buckets; with `--quantize
int8`, quantized by the runtime's quantizer (int8_cache.py) behind the quality gate
(backends/quality_gate.py).

Padded, not packed: the packed graph exports (the segment mask and positions are its inputs,
and it answers as the torch runtime does), but ONNX Runtime runs it slower than length buckets,
whose padding is small: measured on all-MiniLM-L6-v2, 2,000 real sentences through
`Engine.embed` on 2 cores, int8 505 sentences/s packed against 745 padded, float32 365 against
457.

It holds the loaded model (backends/torch_model/), in float32 whatever the runtime computes in: that
is what is exported, the reference the gate checks against, and what runs the model's other
heads (an embedding model's token vectors), which are rare. Text models on the CPU.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from poolserve._environment import cache_dir
from poolserve.backends import quality_gate
from poolserve.backends.graph.int8_cache import Quantizer, int8_graphs
from poolserve.backends.graph.onnx_export import entry_of, exported, valid_model
from poolserve.backends.probe import calibration_split
from poolserve.backends.torch_model.device import cpu_precisions, native_features, place
from poolserve.backends.torch_model.executor import CompiledForward, CompiledRun, ModelExecutor
from poolserve.backends.torch_model.forward_cache import ForwardTarget
from poolserve.backends.torch_model.loaded_model import LoadedModel, RunnerSeats
from poolserve.backends.torch_model.module import PoolingModule
from poolserve.backends.torch_model.precision import probe_batches
from poolserve.config import EngineConfig
from poolserve.config.model_config import Quantize, QuantizeGate
from poolserve.config.runtime_table import RUNTIME_BY_NAME
from poolserve.engine.collate import Batch
from poolserve.engine.model_backend import (
    Collate,
    CompileReport,
    CompileSource,
    Forward,
    PrecisionReport,
    QuantizationReport,
    RuntimeChoice,
)
from poolserve.engine.runner_layout import concurrent_forwards, runner_layout
from poolserve.errors import ModelLoadError, SettingError
from poolserve.models.kinds import Head
from poolserve.models.spec import ModelSpec

logger = logging.getLogger(__name__)


class GraphRuntime(Protocol):
    """What a graph runtime brings: its `--backend` name, how the log names it, how it
    quantizes a graph, and the graph's runs at a thread count."""

    name: CompileSource
    title: str
    quantizer: Quantizer

    def start(self, seats: RunnerSeats) -> None:
        """Called on the loading thread before any graph is run, with how the runners run it."""
        ...

    def run(self, graph: Path, target: ForwardTarget, threads: int) -> CompiledRun:
        """`graph` run at `threads` intra-op threads by any of the runners."""
        ...

    def runner_forwards(self, compiled: tuple[CompiledForward, ...]) -> tuple[CompiledForward, ...]:
        """The forwards the calling runner runs of those loaded (its own where it must)."""
        ...


def graph_backend(
    runtime: GraphRuntime, model: ModelSpec, config: EngineConfig, collate: Collate
) -> GraphBackend:
    """A backend that runs the main head's exported graph on `runtime` on the CPU, in a
    precision the runtime runs (config/runtime_table.py) or int8; a setting it cannot honour is
    refused now."""
    name = runtime.name
    if model.layout.vision is not None:
        raise SettingError(f"--backend {name} serves text models; use --backend torch")
    precision = "float32" if model.dtype == "auto" else model.dtype
    precisions = RUNTIME_BY_NAME[name].precisions
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
    seats = RunnerSeats(
        runners=runners,
        threads=threads or 1,
        runner_threads=threads,
        callers=concurrent_forwards(config, placed) or runners,
        single_thread_tokens=config.single_thread_tokens,
        max_batch_size=min(config.max_batch_size, config.max_batch_tokens),
    )
    return GraphBackend(
        runtime,
        LoadedModel(placed, collate, seats, packing="off"),
        quantize=config.quantize,
        gate=config.quantize_gate,
        precision=precision,
    )


class GraphBackend:
    """The loaded model with its main head run by a graph runtime, one run per thread count a
    runner uses (1, its own, and every runner's for a batch on lent cores)."""

    def __init__(
        self,
        runtime: GraphRuntime,
        model: LoadedModel,
        *,
        quantize: Quantize,
        gate: QuantizeGate,
        precision: str = "float32",
    ) -> None:
        self.runtime = runtime
        self._model = model
        self._quantize = quantize
        self._gate = gate
        # What the runtime computes in (the torch module stays float32).
        self._precision = precision
        self._compiled: tuple[CompiledForward, ...] = ()
        self.report = CompileReport("eager")
        self.quantization: QuantizationReport | None = None
        self.choice: RuntimeChoice | None = None  # the runtime was named, not chosen here

    @property
    def spec(self) -> ModelSpec:
        """The model as placed here, in the precision the runtime runs it in."""
        return replace(self._model.spec, dtype=self._precision)

    @property
    def packed_heads(self) -> frozenset[Head]:
        return frozenset()  # padded batches, always (see above)

    @property
    def precision(self) -> PrecisionReport | None:
        return None  # named, or measured by the chooser (its report says how)

    def load(self) -> None:
        self._model.own_threads()
        self.runtime.start(self._model.seats)
        if not self._restart_from_the_cache():
            self._export(self._model.load(packs=False))
        self._log_runtime()

    def _restart_from_the_cache(self) -> bool:
        """Serve the main head from its float32 graph alone where the cache holds it (the
        runtime holds the weights): the torch module is built at its first call, for another
        head (a restart then skips transformers' model code and the weights). int8 is not
        restarted so: its gate's figures come with the quantized graph, read at load."""
        if self._quantize != "off":
            return False
        model = self._model
        spec, root = model.spec, cache_dir()
        for with_types in (True, False) if spec.kind == "cross_encoder" else (False,):
            target = self._target(with_types)
            graph = valid_model(entry_of(root, spec, target)[0])
            if graph is None:
                continue
            model.defer(frozenset())
            self._compiled = (self._forward(target, graph),)
            self.report = CompileReport(self.runtime.name)
            return True
        return False

    def _target(self, with_types: bool) -> ForwardTarget:
        # Thread count 0: a graph is the same for every count (each run sets its own).
        spec = self._model.spec
        size = self._model.seats.max_batch_size
        return ForwardTarget(spec.heads[0], 0, with_types, size, with_pool_mask=True)

    def _export(self, module: object) -> None:
        assert isinstance(module, PoolingModule)  # image-text models are refused at start
        spec = self._model.spec
        target = self._target(spec.kind == "cross_encoder" and module.takes_token_types)
        graphs = {target: exported(cache_dir(), module, spec, target)}
        if self._quantize == "int8":
            graphs = self._quantized(module, [target], graphs)
        self._compiled = (self._forward(target, graphs[target]),)
        self.report = CompileReport(self.runtime.name)

    def _log_runtime(self) -> None:
        int8 = self.quantization is not None and self.quantization.served == "int8"
        logger.info(
            "%s: the %s head runs on %s (%s, %s)",
            self._model.spec.name,
            self._model.spec.heads[0],
            self.runtime.title,
            "int8" if int8 else self._precision,
            "padded batches in length buckets",
        )

    def _forward(
        self, target: ForwardTarget, graph: Path, counts: Sequence[int] | None = None
    ) -> CompiledForward:
        """Runs of `graph` at `counts` threads (default: each count a runner uses)."""
        counts = counts or self._model.seats.thread_counts
        return CompiledForward(
            {count: self.runtime.run(graph, target, count) for count in counts},
            target.head,
            packed=target.packed,
            takes_pool_mask=not target.packed,
        )

    def executor(self) -> Forward:
        forwards = self.runtime.runner_forwards(self._compiled)
        return self._model.runner_executor(forwards, self.runtime.name)

    def close(self) -> None:
        """Free the runtime's sessions (their weights)."""
        self._compiled = ()

    def _quantized(
        self,
        module: PoolingModule,
        targets: list[ForwardTarget],
        graphs: dict[ForwardTarget, Path],
    ) -> dict[ForwardTarget, Path]:
        """The int8 graphs where they pass the gate, else (fallback) the float32 ones."""
        started = time.perf_counter()
        spec, collate, threads = self._model.spec, self._model.collate, self._model.seats.threads
        head = targets[0].head
        calibrate_on, check_on = calibration_split()

        def batches(texts: tuple[str, ...]) -> dict[ForwardTarget, list[Batch]]:
            return {t: probe_batches(spec, collate, packed=t.packed, texts=texts) for t in targets}

        # Measured only where a graph is built (a restart reads the figures from the cache).
        checks = functools.cache(lambda: batches(check_on))
        reference = ModelExecutor(module, torch.device("cpu"), 0)

        @functools.cache
        def expected(target: ForwardTarget) -> list[np.ndarray]:
            return _outputs(reference, checks()[target], threads)

        def measure(target: ForwardTarget, graph: Path) -> dict[str, float]:
            forward = self._forward(target, graph, (threads,))
            run = ModelExecutor(module, torch.device("cpu"), 0, (forward,))
            got = _outputs(run, checks()[target], threads)
            return quality_gate.figures(head, expected(target), got)

        quantized, figures = int8_graphs(
            cache_dir(),
            spec,
            targets,
            graphs,
            lambda: batches(calibrate_on),
            measure,
            self.runtime.quantizer,
        )
        failures = quality_gate.failures(figures)
        served = "int8" if not failures else "float32"
        self.quantization = QuantizationReport(
            "int8", served, figures, failures, time.perf_counter() - started
        )
        described = ", ".join(f"{name} {value:.4f}" for name, value in figures.items())
        if not failures:
            logger.info("%s: int8 passes the quality gate (%s)", spec.name, described)
            return quantized
        why = "; ".join(failures)
        if self._gate == "refuse":
            raise ModelLoadError(
                f"{spec.name}: int8 fails the quality gate against float32 ({why}); serve "
                "it unquantized (leave --quantize out) or with --quantize-gate fallback"
            )
        logger.warning(
            "%s: int8 fails the quality gate (%s); serving float32 (--quantize-gate fallback)",
            spec.name,
            why,
        )
        return graphs


def _outputs(executor: ModelExecutor, batches: Sequence[Batch], threads: int) -> list[np.ndarray]:
    return [output for batch in batches for output in executor(batch, threads)]
