"""The model backend seam: weights loaded once and shared, one executor per runner thread.

`Backend.load()` runs once, on the first runner's thread, before any executor exists;
`Backend.executor()` then runs on each runner's own thread and returns that runner's `Forward`,
warmed up. What crosses the seam is plain: numpy batches in (engine/collate.py), one float32 array
per item out, device and dtype as names (`ModelSpec`). Every ability a backend may lack is
declared here with what "none" means (`packed_heads` empty, `report` eager, `close` nothing to
free), so the engine asks and never probes.

A backend is a package under `poolserve/backends/` whose module has a `make_backend` factory,
and one entry naming it (config/runtime_table.py: its `--backend` name, module, extra and what
it runs). Tests wrap a backend to inject faults (a slow or failing forward) without touching the
engine's internals.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

import numpy as np

from poolserve.config import EngineConfig
from poolserve.engine.collate import Batch
from poolserve.engine.work import WorkItem
from poolserve.models.kinds import Head
from poolserve.models.spec import ModelSpec

# One batch through the model with at most `threads` intra-op threads: one float32 array per item.
Forward = Callable[[Batch, int], Sequence[np.ndarray]]
# Items to a batch, packed if asked (engine/collate.py).
Collate = Callable[[list[WorkItem], bool], Batch]

# How the main head's forward was obtained: compiled ahead of time at this start ("built"), from
# the cache ("cached"), by torch.compile ("jit"), not compiled ("eager"), exported and run by
# ONNX Runtime ("onnxruntime") or OpenVINO ("openvino"), or a static model's table ("table").
CompileSource = Literal["built", "cached", "jit", "eager", "onnxruntime", "openvino", "table"]


@dataclass(frozen=True)
class CompileReport:
    source: CompileSource
    seconds: float = 0.0
    # How many times as fast as eager the compiled forward ran the probe, by thread count
    # (where it was measured); "eager" with gains: compiled, but it did not pay.
    gains: Mapping[int, float] = field(default_factory=dict)


@dataclass(frozen=True)
class PrecisionReport:
    """How `--dtype auto` chose the precision a model runs in: the seconds its probe took in
    each precision measured, each one's worst distance from float32's outputs, and whether it
    was measured at this start or read from the cache."""

    dtype: str
    seconds: Mapping[str, float]
    errors: Mapping[str, float]
    source: Literal["measured", "cached"]


@dataclass(frozen=True)
class QuantizationReport:
    """How a quantized model did against its unquantized self at start-up (backends/
    quality_gate.py): the scheme asked for, what is served (the scheme, or float32 where the
    gate failed and `--quantize-gate fallback` asked to serve it unquantized), the gate's
    figures over the probe and what fell short (empty: it passed)."""

    scheme: str
    served: str
    figures: Mapping[str, float]
    failures: tuple[str, ...]
    seconds: float


@dataclass(frozen=True)
class RuntimeTrial:
    """One runtime and precision `--backend auto` tried (backends/choice/): its speed over the
    probe (None: not measured), how its outputs compare with torch float32's (the quality
    gate's figures, and `error`, the worst relative L2 distance), and what came of it: "chosen",
    "slower" (and how it was timed where not alike), or why it was left out (not installed,
    failed to load or export, off the gate)."""

    runtime: str
    precision: str
    sentences_per_second: float | None
    # One sentence alone, median milliseconds (what a quiet server's request waits).
    single_ms: float | None
    figures: Mapping[str, float]
    error: float | None
    outcome: str


@dataclass(frozen=True)
class RuntimeChoice:
    """How `--backend auto` chose the runtime and precision a model runs in: every trial, and
    whether they were measured at this start, read from the cache, or not needed (one
    candidate)."""

    runtime: str
    precision: str
    trials: tuple[RuntimeTrial, ...]
    source: Literal["measured", "cached", "only candidate"]
    seconds: float = 0.0


class Backend(Protocol):
    """What the engine asks of a model backend."""

    @property
    def spec(self) -> ModelSpec:
        """The model as this backend runs it: its device chosen (by name) when the backend was
        built, before anything loads, and its precision then, or (measured) once loaded."""
        ...

    @property
    def packed_heads(self) -> frozenset[Head]:
        """The heads whose batches the engine collates packed (known once loaded, before any
        runner takes a batch; empty for a backend that runs padded batches only)."""
        ...

    @property
    def report(self) -> CompileReport:
        """How the main head's forward was obtained ("eager" for a backend that compiles
        nothing)."""
        ...

    @property
    def precision(self) -> PrecisionReport | None:
        """How the precision was measured on the machine (once loaded; None where it was asked
        for, or is not measured)."""
        ...

    @property
    def quantization(self) -> QuantizationReport | None:
        """The quantized model's quality gate (once loaded; None where nothing is quantized)."""
        ...

    @property
    def choice(self) -> RuntimeChoice | None:
        """How `--backend auto` chose the runtime (once loaded; None where it was asked for)."""
        ...

    def load(self) -> None:
        """Load the weights (once, on the first runner's thread)."""
        ...

    def executor(self) -> Forward:
        """A warmed-up forward for the calling runner thread (after `load`)."""
        ...

    def close(self) -> None:
        """Free what the loaded model holds beyond its weights (called once no runner runs a
        forward; nothing, for a backend that holds nothing more)."""
        ...


# Builds the backend of a model (`make_backend` of a backend's module): the seam where tests
# inject faults. It places the model (device, dtype) and checks its settings; it loads nothing.
BackendFactory = Callable[[ModelSpec, EngineConfig, Collate], Backend]
