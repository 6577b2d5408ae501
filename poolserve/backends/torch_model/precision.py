"""`--dtype auto` on a CPU with more than one fast precision: the precision measured on the
machine.

Which precision is fastest depends on the CPU, not on a rule: with AMX, bf16 runs about twice
float32; with AVX512-BF16 alone it was measured slower than float32 (all-MiniLM-L6-v2, real
prose, batches of 32: 248 against 313 sentences/s). So the model is loaded in each precision
the CPU runs well (device.cpu_precisions), one at a time beside the best so far, and its main
head run over the probe (backends/probe.txt: 64 real sentences, in batches of 32 sorted by
length) on the runner's own threads: a warm-up pass, then `TIMED_PASSES`, the median kept. The
fastest whose outputs stay within `TOLERANCE` of float32's is served. The choice and its numbers
are kept in the cache (`POOLSERVE_CACHE_DIR/precision/<key>.json`, the key: the CPU, the model's
files, its kind and head, the thread count and the library versions), so a restart loads the
chosen precision without measuring again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import TypeVar

import numpy as np
import torch

from poolserve.backends.probe import probe_texts
from poolserve.backends.progress import progress
from poolserve.backends.torch_model.device import cpu_precisions
from poolserve.backends.torch_model.executor import ModelExecutor
from poolserve.backends.torch_model.forward_cache import keyed_file, measured_on, write_json
from poolserve.engine.collate import Batch, text_item
from poolserve.engine.model_backend import Collate, Forward, PrecisionReport
from poolserve.engine.work import RequestGroup
from poolserve.inputs.tokenizer import TextTokenizer
from poolserve.models.spec import ModelSpec

logger = logging.getLogger(__name__)

# Each input's output in a lower precision must be within this relative L2 distance of float32's
# (0.045 is a cosine of 0.999 between unit vectors).
TOLERANCE = 0.045
PROBE_BATCH = 32
TIMED_PASSES = 3
# Bumped when what an entry holds, or how it is measured, changes.
FORMAT = 1

Module = Callable[..., torch.Tensor]
M = TypeVar("M", bound=Module)


def probe_batches(
    spec: ModelSpec,
    collate: Collate,
    *,
    packed: bool = False,
    texts: Sequence[str] | None = None,
) -> list[Batch]:
    """The probe's sentences (or `texts`) as batches of the model's main head, sorted by
    length, padded (or `packed`)."""
    tokenizer = TextTokenizer(spec.tokenizer)
    ids = tokenizer.encode_batch(list(texts or probe_texts()), truncate_to=spec.max_model_len)
    ids.sort(key=len)
    head = spec.heads[0]
    batches = []
    for start in range(0, len(ids), PROBE_BATCH):
        chunk = ids[start : start + PROBE_BATCH]
        group = RequestGroup(len(chunk))
        items = [text_item(group, i, each, head=head) for i, each in enumerate(chunk)]
        batches.append(collate(items, packed))
    return batches


def cache_file(root: Path, spec: ModelSpec, threads: int) -> Path:
    """Where the choice for this model, CPU and thread count is kept."""
    import transformers

    parts = {
        "format": FORMAT,
        **measured_on(spec),
        "threads": threads,
        "precisions": cpu_precisions(),
        "probe": hashlib.sha256("\n".join(probe_texts()).encode()).hexdigest(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
    return keyed_file(root, "precision", parts)


def cached_choice(path: Path) -> PrecisionReport | None:
    """The choice an earlier start measured, if the cache holds it (None: measure)."""
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
        return PrecisionReport(
            dtype=str(entry["dtype"]),
            seconds={str(k): float(v) for k, v in entry["seconds"].items()},
            errors={str(k): float(v) for k, v in entry["errors"].items()},
            source="cached",
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def save_choice(path: Path, report: PrecisionReport) -> None:
    """Keep the choice for the next start (written whole, then renamed into place)."""
    write_json(path, {**asdict(report), "source": "measured"})


def measure(
    load: Callable[[str], M],
    batches: Sequence[Batch],
    device: str,
    threads: int,
) -> tuple[M, PrecisionReport]:
    """Load the model in each precision the CPU runs well, time its probe, and keep the
    fastest within `TOLERANCE` of float32 (at most two copies of the weights at once)."""
    best_module = load("float32")
    reference, best_seconds = _run(best_module, batches, device, threads)
    best, seconds, errors = "float32", {"float32": best_seconds}, {"float32": 0.0}
    for dtype in cpu_precisions()[1:]:
        module = load(dtype)
        outputs, seconds[dtype] = _run(module, batches, device, threads)
        errors[dtype] = worst_error(outputs, reference)
        if errors[dtype] <= TOLERANCE and seconds[dtype] < best_seconds:
            best, best_module, best_seconds = dtype, module, seconds[dtype]
        del module
    return best_module, PrecisionReport(best, seconds, errors, "measured")


def _run(
    module: Module, batches: Sequence[Batch], device: str, threads: int
) -> tuple[list[np.ndarray], float]:
    """The module's outputs for the probe, and the median seconds of a timed pass over it."""
    executor = ModelExecutor(module, torch.device(device), single_thread_tokens=0)
    return timed_passes(executor, batches, threads)


def timed_passes(
    forward: Forward,
    batches: Sequence[Batch],
    threads: int,
) -> tuple[list[np.ndarray], float]:
    """The outputs of the batches (a pass that also warms up), and the median seconds of
    `TIMED_PASSES` more."""
    outputs = [output for batch in batches for output in forward(batch, threads)]
    passes = []
    for _ in range(TIMED_PASSES):
        started = time.perf_counter()
        for batch in batches:
            forward(batch, threads)
        passes.append(time.perf_counter() - started)
    return outputs, statistics.median(passes)


def worst_error(outputs: Sequence[np.ndarray], reference: Sequence[np.ndarray]) -> float:
    """The largest relative L2 distance of an input's output from its reference (float32's)."""
    worst = 0.0
    for output, expected in zip(outputs, reference, strict=True):
        got, want = np.asarray(output, np.float64), np.asarray(expected, np.float64)
        scale = max(float(np.linalg.norm(want)), 1e-6)
        worst = max(worst, float(np.linalg.norm(got - want)) / scale)
    return worst


def describe(name: str, report: PrecisionReport) -> str:
    """The one log line of a choice."""
    numbers = ", ".join(
        f"{dtype} {seconds * 1000:.0f} ms"
        + (f" (error {report.errors[dtype]:.4f})" if dtype != "float32" else "")
        for dtype, seconds in report.seconds.items()
    )
    how = "measured now" if report.source == "measured" else "as measured at an earlier start"
    return (
        f"{name}: --dtype auto serves {report.dtype} on this CPU ({how}, the probe's 64 "
        f"sentences: {numbers}; a precision is kept within {TOLERANCE} of float32)"
    )


def from_cache_or_measure(
    root: Path,
    spec: ModelSpec,
    load: Callable[[str], M],
    collate: Collate,
    threads: int,
) -> tuple[M, PrecisionReport]:
    """The module in the chosen precision and how it was chosen (one log line)."""
    path = cache_file(root, spec, threads)
    report = cached_choice(path)
    if report is not None:
        module = load(report.dtype)
    else:
        what = (
            f"{spec.name}: measuring its speed in {', '.join(cpu_precisions())} "
            f"on {threads} thread(s)"
        )
        with progress(logger, what):
            module, report = measure(load, probe_batches(spec, collate), spec.device, threads)
        save_choice(path, report)
    logger.info(describe(spec.name, report))
    return module, report


def load_in_precision(
    root: Path, spec: ModelSpec, load: Callable[[ModelSpec], M], collate: Collate, threads: int
) -> tuple[M, PrecisionReport | None]:
    """The module in the spec's dtype, or for `auto` in the one chosen (`from_cache_or_measure`)
    and how it was chosen."""
    if spec.dtype != "auto":
        return load(spec), None
    return from_cache_or_measure(
        root, spec, lambda dtype: load(replace(spec, dtype=dtype)), collate, threads
    )
