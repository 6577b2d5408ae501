"""The int8 graphs of a model, built once into the cache with their quality gate's figures.

A `Quantizer` says how one runtime quantizes a float32 graph at a SmoothQuant α: ONNX Runtime's
(backends/onnxruntime/ort_backend.py) or OpenVINO's (backends/openvino/ov_int8.py). The first
graph chooses the α (the quantizer's `alphas`, in order: the first that passes the quality gate
over the held-out sentences); the other graphs take the same α. The choice and the gate's
figures of the graph kept are recorded in each entry's manifest, so a restart loads the graphs
and reads their figures without quantizing or measuring again: the figures are those of the same
graph on the same kernels (the key holds the CPU's instruction set and the runtime's version),
over the same held-out sentences, so measuring again would give the same numbers.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import reduce
from pathlib import Path
from typing import Any

import torch

from poolserve.backends import quality_gate
from poolserve.backends.graph.onnx_export import (
    MODEL_FILE,
    Feeds,
    cached_or_built,
    entry_of,
    graph_inputs,
    input_names,
    manifest_of,
)
from poolserve.backends.probe import calibration_texts
from poolserve.backends.progress import progress
from poolserve.backends.torch_model.executor import to_torch
from poolserve.backends.torch_model.forward_cache import ForwardTarget
from poolserve.engine.collate import Batch
from poolserve.models.spec import ModelSpec

logger = logging.getLogger(__name__)

# Bumped when how a graph is quantized changes.
INT8_FORMAT = 1

# The gate's figures of a graph of a target, over its probe batches.
Measure = Callable[[ForwardTarget, Path], dict[str, float]]


@dataclass(frozen=True)
class Quantizer:
    """How a runtime quantizes a float32 graph: `prepare(graph, feeds)` once (what every α
    shares, such as activation ranges), then `quantize(prepared, alpha, directory)` writes the
    int8 graph, `model_file`, into `directory`."""

    name: str
    alphas: tuple[float, ...]
    prepare: Callable[[Path, Sequence[Feeds]], Any]
    quantize: Callable[[Any, float, Path], Path]
    # What the graphs depend on beyond the exported one: the runtime's versions, the code.
    versions: Callable[[], dict[str, str]]
    code: tuple[Path, ...]
    model_file: str = MODEL_FILE


def int8_graphs(
    root: Path,
    spec: ModelSpec,
    targets: Sequence[ForwardTarget],
    graphs: Mapping[ForwardTarget, Path],
    calibration: Callable[[], Mapping[ForwardTarget, Sequence[Batch]]],
    measure: Measure,
    quantizer: Quantizer,
) -> tuple[dict[ForwardTarget, Path], dict[str, float]]:
    """Each target's int8 graph (from its float32 `graphs[target]`, calibrated over
    `calibration()`'s batches where it is built), and the gate's figures of them all, the worse
    of the targets' figure by figure (`measure`d where a graph is built)."""
    quantized: dict[ForwardTarget, Path] = {}
    gates: list[dict[str, float]] = []
    alpha: float | None = None
    for target in targets:
        entry, parts = entry_of(
            root,
            spec,
            target,
            quantize=f"int8-{quantizer.name}",
            int8_format=INT8_FORMAT,
            int8_code=_int8_code(quantizer.code),
            **quantizer.versions(),
        )
        alphas = None if alpha is None else (alpha,)

        def build(
            directory: Path,
            target: ForwardTarget = target,
            alphas: tuple[float, ...] | None = alphas,
        ) -> dict[str, Any]:
            probe = calibration()[target]
            return _build(
                directory,
                spec,
                target,
                graphs[target],
                probe,
                alphas or quantizer.alphas,
                measure,
                quantizer,
            )

        quantized[target] = cached_or_built(entry, parts, build, quantizer.model_file)
        alpha = float(manifest_of(entry)["alpha"])
        gates.append(manifest_of(entry)["gate"])
    return quantized, reduce(quality_gate.worse, gates)


@functools.cache
def _int8_code(code: tuple[Path, ...]) -> str:
    """What an int8 graph and its figures depend on beyond the exported graph: how it is
    quantized (`code`) and gated, and the text it is calibrated and checked on."""
    here = Path(__file__).resolve().parent
    backends = here.parent
    digest = hashlib.sha256()
    for path in (*code, here / "int8_cache.py", backends / "quality_gate.py"):
        digest.update(path.read_bytes())
    digest.update("\n".join(calibration_texts()).encode())
    return digest.hexdigest()


def _build(
    directory: Path,
    spec: ModelSpec,
    target: ForwardTarget,
    graph: Path,
    probe: Sequence[Batch],
    alphas: Sequence[float],
    measure: Measure,
    quantizer: Quantizer,
) -> dict[str, Any]:
    """Quantize `graph` at each α into `directory` until one passes the gate, and keep that one
    (none passing: the best by the gate's figures, which the caller then refuses or falls back
    from)."""
    layout = "packed" if target.packed else "padded"
    names = input_names(target)
    cpu = torch.device("cpu")
    feeds = [
        dict(zip(names, graph_inputs(to_torch(batch, cpu), target), strict=True)) for batch in probe
    ]
    best: tuple[float, dict[str, float], Path] | None = None
    what = f"{spec.name}: quantizing the {target.head} head to int8 ({layout}, {quantizer.name})"
    with progress(logger, what):
        prepared = quantizer.prepare(graph, feeds)
        for alpha in alphas:
            candidate = directory / f"alpha-{alpha}"
            candidate.mkdir()
            path = quantizer.quantize(prepared, alpha, candidate)
            figures = measure(target, path)
            logger.info(
                "%s: int8 (%s) with SmoothQuant alpha %.2g: %s",
                spec.name,
                layout,
                alpha,
                ", ".join(f"{name} {value:.4f}" for name, value in figures.items()),
            )
            if best is None or quality_gate.quality(figures) > quality_gate.quality(best[1]):
                best = (alpha, figures, candidate)
            if not quality_gate.failures(figures):
                break  # every α runs as fast: the first that passes the gate is kept
    assert best is not None
    alpha, figures, chosen = best
    for path in chosen.iterdir():
        path.rename(directory / path.name)
    for candidate in directory.glob("alpha-*"):
        shutil.rmtree(candidate)
    return {"model": spec.name, "alpha": alpha, "gate": figures}
