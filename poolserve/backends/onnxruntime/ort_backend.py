"""The ONNX Runtime backend (`--backend onnxruntime`): the main head's exported graph
(backends/graph/) run by ONNX Runtime, one session per thread count a runner uses; with
`--quantize int8`, in ONNX Runtime's dynamic int8 after SmoothQuant (int8.py). Text models on
the CPU, in float32 or int8."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import onnxruntime
import torch

from poolserve.backends.graph.graph_backend import GraphBackend, graph_backend
from poolserve.backends.graph.int8_cache import Quantizer
from poolserve.backends.graph.onnx_export import MODEL_FILE, Feeds, graph_inputs
from poolserve.backends.torch_model.executor import CompiledForward, CompiledRun, TorchBatch
from poolserve.backends.torch_model.forward_cache import ForwardTarget
from poolserve.backends.torch_model.loaded_model import RunnerSeats
from poolserve.config import EngineConfig
from poolserve.engine.model_backend import BackendFactory, Collate, CompileSource
from poolserve.models.spec import ModelSpec


def make_backend(model: ModelSpec, config: EngineConfig, collate: Collate) -> GraphBackend:
    """The ONNX Runtime backend of `model`; a setting it cannot honour is refused now."""
    return graph_backend(OnnxRuntime(), model, config, collate)


def _prepare(graph: Path, feeds: Sequence[Feeds]) -> tuple[Path, Any]:
    # ONNX Runtime's quantizer takes a second to import: only where a graph is quantized.
    from poolserve.backends.onnxruntime.int8 import activation_ranges

    return graph, activation_ranges(graph, feeds)


def _quantize(prepared: tuple[Path, Any], alpha: float, directory: Path) -> Path:
    from poolserve.backends.onnxruntime.int8 import quantize, smoothed

    graph, ranges = prepared
    return quantize(smoothed(graph, ranges, alpha), directory, MODEL_FILE)


ORT_INT8 = Quantizer(
    name="onnxruntime",
    # 0.8 first: the best measured on all-MiniLM-L6-v2, a worst cosine of 0.9915 over the
    # benchmarks' 2,000 real sentences.
    alphas=(0.8, 0.7, 0.6),
    prepare=_prepare,
    quantize=_quantize,
    versions=dict,  # ONNX Runtime's version is in every ONNX entry's key (onnx_export.py)
    code=(Path(__file__).resolve().parent / "int8.py",),
)


class OnnxRuntime:
    """ONNX Runtime as a graph runtime (graph/graph_backend.py): a session per thread count,
    which every runner may run at once."""

    name: CompileSource = "onnxruntime"
    title = "ONNX Runtime"
    quantizer = ORT_INT8

    def start(self, seats: RunnerSeats) -> None:
        """Nothing to note: a session serves any thread that calls it."""

    def run(self, graph: Path, target: ForwardTarget, threads: int) -> CompiledRun:
        return OrtRun(graph, target, threads)

    def runner_forwards(self, compiled: tuple[CompiledForward, ...]) -> tuple[CompiledForward, ...]:
        return compiled


class OrtRun:
    """One ONNX Runtime session of a graph at one intra-op thread count, as a `CompiledRun`."""

    def __init__(self, graph: Path, target: ForwardTarget, threads: int) -> None:
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


# The backend seam, checked by the type checker: this module's factory builds a `Backend`.
_FACTORY: BackendFactory = make_backend
