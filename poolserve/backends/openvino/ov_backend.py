"""The OpenVINO backend (`--backend openvino`): the main head's forward exported to ONNX at first
start (the same graph and cache as the ONNX Runtime backend's, backends/graph/), compiled
by OpenVINO's CPU plugin, in padded batches cut into length buckets; with `--quantize int8`,
quantized by NNCF (ov_int8.py) behind the quality gate (backends/quality_gate.py).

It is a graph runtime (backends/graph/) beside ONNX Runtime: the loaded model
(backends/torch_model/) is what is exported, the float32 reference the gate checks against, and what
runs the model's other heads. Why a second runtime: on a CPU with VNNI, OpenVINO's static int8
(activation ranges calibrated once) runs faster than ONNX Runtime's dynamic int8, which measures
each activation's range as it runs (docs/benchmarks.md).

Each compiled model runs at a fixed number of inference threads per stream, with a stream for
each runner that may run it at once, unpinned (the runners share the cores with the tokenizers),
at the precision `--dtype` names: float32, or bf16 on a CPU with
AVX512-BF16 or AMX (OpenVINO's own default there; poolserve pins it, so that what runs is what
was asked for, or what `--backend auto` measured behind the gate: backends/choice/). On a 2-core
AMD EPYC without AMX bf16 ran 1.6x its float32 (docs/benchmarks.md). A runner thread keeps its
own infer request of each compiled model.

OpenVINO infers on threads of its own (a thread per stream), not on the caller's, and those
threads take the OS priority of the thread that made them (OpenVINO keeps a finished model's
threads for the next model compiled with as many streams and threads; in poolserve every model
of several streams is compiled on a runner's thread). Sharing the runners' models, the express
runner's query waited for a stream a background batch held, then ran at the runners' lower
priority (engine/engine_core.py: 3x its idle p99 beside a bulk job). So the express runner
compiles models of its own, one stream each, which OpenVINO runs on the calling thread: its
own, at its priority.
"""

from __future__ import annotations

import functools
import os
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy
import openvino
import torch

from poolserve.backends.graph.graph_backend import GraphBackend, graph_backend
from poolserve.backends.graph.onnx_export import graph_inputs, input_names
from poolserve.backends.openvino.ov_int8 import OPENVINO_INT8
from poolserve.backends.torch_model.executor import CompiledForward, CompiledRun, TorchBatch
from poolserve.backends.torch_model.forward_cache import ForwardTarget
from poolserve.backends.torch_model.loaded_model import RunnerSeats
from poolserve.config import EngineConfig
from poolserve.engine.model_backend import BackendFactory, Collate, CompileSource
from poolserve.engine.runner import thread_nice
from poolserve.models.spec import ModelSpec


def make_backend(model: ModelSpec, config: EngineConfig, collate: Collate) -> GraphBackend:
    """The OpenVINO backend of `model`; a setting it cannot honour is refused now."""
    precision = "float32" if model.dtype == "auto" else model.dtype
    return graph_backend(OpenVinoRuntime(_HINTS.get(precision, "f32")), model, config, collate)


class OpenVinoRuntime:
    """OpenVINO as a graph runtime (graph/graph_backend.py): a model compiled per thread count
    a runner uses, with a stream for each runner that may run it at once."""

    name: CompileSource = "openvino"
    title = "OpenVINO"
    quantizer = OPENVINO_INT8

    def __init__(self, precision_hint: str) -> None:
        self._hint = precision_hint
        self._seats = RunnerSeats()
        self._loaded_nice = 0

    @functools.cached_property
    def _core(self) -> Any:
        return openvino.Core()

    def start(self, seats: RunnerSeats) -> None:
        self._seats = seats
        # The priority of the thread that loads, which the loaded models' threads take.
        self._loaded_nice = thread_nice()

    def run(self, graph: Path, target: ForwardTarget, threads: int) -> CompiledRun:
        # Every runner at the loading thread's priority may run a count up to its own at once;
        # more (lent cores) one at a time.
        streams = self._sharing() if threads <= self._seats.threads else 1
        return OvRun(self._core, graph, target, threads, streams, self._hint)

    def _sharing(self) -> int:
        """How many runners run the loaded models: all of them, but the express runner where
        its thread runs at another priority (it makes its own: `runner_forwards`)."""
        # The runners' threads run below the thread that started them (the express runner's
        # priority), unless the system refused to lower them (engine/runner.py).
        seats = self._seats
        apart = seats.callers > seats.runners and self._loaded_nice > os.getpriority(
            os.PRIO_PROCESS, os.getpid()
        )
        return seats.runners if apart else seats.callers

    def runner_forwards(self, compiled: tuple[CompiledForward, ...]) -> tuple[CompiledForward, ...]:
        """The loaded models for a runner at the loading thread's priority; for one at another
        (the express runner), models of its own, one stream each (run on its thread), at the
        counts it runs (its own threads or fewer: it borrows no cores)."""
        if thread_nice() == self._loaded_nice:
            return compiled
        return tuple(
            replace(
                forward,
                runs={
                    count: OvRun(self._core, run.graph, run.target, count, 1, run.precision)
                    for count, run in forward.runs.items()
                    if count <= self._seats.threads and isinstance(run, OvRun)
                },
            )
            for forward in compiled
        )


# OpenVINO's names of the precisions it runs.
_HINTS = {"float32": "f32", "bfloat16": "bf16"}


class OvRun:
    """A graph compiled by OpenVINO for one inference thread count, as a `CompiledRun`, with
    `streams` inferences able to run at once (a compiled model runs one at a time per stream:
    measured, two threads on one stream ran 1.08x one thread's work, on two streams 1.70x)."""

    def __init__(
        self,
        core: Any,
        graph: Path,
        target: ForwardTarget,
        threads: int,
        streams: int,
        precision: str = "f32",
    ) -> None:
        config = {
            "INFERENCE_NUM_THREADS": threads * streams,
            "NUM_STREAMS": streams,
            "PERFORMANCE_HINT": "LATENCY",
            "INFERENCE_PRECISION_HINT": precision,
            "ENABLE_CPU_PINNING": False,
        }
        self._compiled = core.compile_model(str(graph), "CPU", config)
        # What another compile of it needs (`OpenVinoRuntime.runner_forwards`).
        self.graph, self.target, self.precision = graph, target, precision
        # OpenVINO's bindings load numpy's C API on their first array: two runners warming up
        # at once deadlocked there (pybind11's call-once waits for the GIL its other caller
        # holds), so the loading thread loads it first, alone.
        _ = openvino.Tensor(numpy.zeros(1, dtype=numpy.float32)).data
        takes = {name for port in self._compiled.inputs for name in port.get_names()}
        self._names = input_names(target)
        self._fed = [name for name in self._names if name in takes]
        self._requests = threading.local()

    def __call__(self, batch: TorchBatch) -> torch.Tensor:
        request = getattr(self._requests, "request", None)
        if request is None:
            request = self._requests.request = self._compiled.create_infer_request()
        arrays = dict(zip(self._names, graph_inputs(batch, self.target), strict=True))
        result = request.infer({name: arrays[name] for name in self._fed})
        return torch.from_numpy(result[0])


# The backend seam, checked by the type checker: this module's factory builds a `Backend`.
_FACTORY: BackendFactory = make_backend
