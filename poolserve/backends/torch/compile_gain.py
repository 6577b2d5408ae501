"""`--compile auto` compiles only where it pays: the compiled forward's gain over eager, measured
on the machine at each thread count it was compiled for, and kept in the cache.

What compiling buys depends on the CPU and on the batch: measured on a 2-core AVX512-BF16 Xeon
(all-MiniLM-L6-v2, float32, packed), one sentence at a time ran 1.52x faster compiled on one
thread, batches of 32 1.09x on one thread and 1.00x on two. So after the compiled forward is
built (or loaded) and warmed, the probe (backends/probe.txt: its batches of 32, and 16 of its
sentences one at a time) runs eagerly and compiled at each thread count, each batch only where
serving would run it (a small batch always runs on one thread: executor.py), the median of a few
passes kept. A thread count whose compiled forward is less than `MIN_GAIN` times as fast is
dropped and runs eagerly; one whose outputs stray from eager's is dropped too (that would be a
compiler bug, and is logged as one). Each count's figures are kept beside the compiled cache
(`POOLSERVE_CACHE_DIR/compile-gain/<entry key>.json`: the key names the model, CPU, dtype and
thread count as the library's does), so a restart neither measures again nor loads (or, where
nothing pays, builds) a library that does not pay. `--compile on` compiles whatever this finds.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from poolserve.backends.probe import probe_texts
from poolserve.backends.progress import progress
from poolserve.backends.torch_model import precision
from poolserve.backends.torch_model.executor import CompiledForward, ModelExecutor
from poolserve.backends.torch_model.forward_cache import ForwardTarget, entry_for, write_json
from poolserve.engine.collate import Batch
from poolserve.engine.model_backend import Collate, CompileReport, Forward
from poolserve.models.spec import ModelSpec

logger = logging.getLogger(__name__)

# The compiled forward must run the probe at least this much faster than eager to be served.
MIN_GAIN = 1.05
# Sentences of the probe also run one at a time (what a quiet server's requests are).
SINGLE_SENTENCES = 16
# Bumped when what a figure holds, or how it is measured, changes.
FORMAT = 1


@dataclass(frozen=True)
class Gain:
    """The probe's median seconds eagerly and compiled at one thread count."""

    eager_seconds: float
    compiled_seconds: float
    # The compiled outputs' largest relative distance from eager's.
    error: float

    @property
    def ratio(self) -> float:
        return self.eager_seconds / max(self.compiled_seconds, 1e-9)

    @property
    def pays(self) -> bool:
        return self.error <= precision.TOLERANCE and self.ratio >= MIN_GAIN


def gain_file(root: Path, spec: ModelSpec, target: ForwardTarget) -> Path:
    """Where the gain of `target`'s compiled forward is kept (named as its library's entry)."""
    entry, _ = entry_for(root, spec, target, family="compile-gain", extra={"gain": FORMAT})
    return entry.directory.with_suffix(".json")


def cached_gain(path: Path) -> Gain | None:
    try:
        figures = json.loads(path.read_text(encoding="utf-8"))
        return Gain(
            float(figures["eager_seconds"]),
            float(figures["compiled_seconds"]),
            float(figures["error"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save_gain(path: Path, gain: Gain) -> None:
    """Keep the figures for the next start (written whole, then renamed into place)."""
    write_json(path, asdict(gain))


def probe(spec: ModelSpec, collate: Collate, packed: bool) -> list[Batch]:
    """The probe's batches of 32, then some of its sentences one at a time."""
    singles = [
        batch
        for text in probe_texts()[:SINGLE_SENTENCES]
        for batch in precision.probe_batches(spec, collate, packed=packed, texts=[text])
    ]
    return [*precision.probe_batches(spec, collate, packed=packed), *singles]


def measure(
    eager: Forward,
    compiled: Forward,
    batches: Sequence[Batch],
    threads: int,
    runs_at: Callable[[Batch, int], int],
) -> Gain:
    """The probe's batches that serving runs at `threads` (`runs_at`: the thread count a batch
    gets), eagerly and compiled."""
    mine = [batch for batch in batches if runs_at(batch, threads) == threads]
    expected, eager_seconds = precision.timed_passes(eager, mine, threads)
    outputs, compiled_seconds = precision.timed_passes(compiled, mine, threads)
    return Gain(eager_seconds, compiled_seconds, precision.worst_error(outputs, expected))


def describe(name: str, gains: Mapping[int, Gain], source: str) -> str:
    """The one log line of the figures."""
    figures = ", ".join(
        f"{threads} thread(s): {gain.ratio:.2f}x"
        + ("" if gain.error <= precision.TOLERANCE else f" but off by {gain.error:.3f}")
        for threads, gain in sorted(gains.items())
    )
    kept = [threads for threads, gain in sorted(gains.items()) if gain.pays]
    dropped = [threads for threads, gain in sorted(gains.items()) if not gain.pays]
    if not kept:
        served = "eagerly (--compile on serves it compiled)"
    elif dropped:
        served = f"compiled, but eagerly at {', '.join(map(str, dropped))} thread(s)"
    else:
        served = "compiled"
    return (
        f"{name}: the compiled forward against eager on the probe ({source}; {figures}; it must "
        f"be {MIN_GAIN:.2f}x as fast): serving it {served}"
    )


def measure_targets(
    root: Path,
    spec: ModelSpec,
    collate: Collate,
    targets: Sequence[ForwardTarget],
    *,
    eager: ModelExecutor,
    compiled: ModelExecutor,
) -> dict[int, Gain]:
    """Each target's gain (one log line, a warning for a compiled forward off from eager's),
    kept in the cache under `root`."""
    gains = {}
    batches = probe(spec, collate, targets[0].packed)
    with progress(logger, f"{spec.name}: measuring the compiled forward against eager"):
        for target in targets:
            gain = measure(eager, compiled, batches, target.threads, compiled.threads_for)
            if gain.error > precision.TOLERANCE:
                logger.warning(
                    "%s: the compiled forward's outputs differ from eager's by %.3f at %d "
                    "thread(s) (a compiler bug); that count runs eagerly",
                    spec.name,
                    gain.error,
                    target.threads,
                )
            save_gain(gain_file(root, spec, target), gain)
            gains[target.threads] = gain
    logger.info(describe(spec.name, gains, "measured now"))
    return gains


def paying(compiled: CompiledForward, gains: Mapping[int, Gain]) -> CompiledForward | None:
    """The compiled forward at the thread counts where it pays (None: at none); the runs
    dropped are closed (a library's instances free their weights)."""
    kept = {count: run for count, run in compiled.runs.items() if gains[count].pays}
    for count, run in compiled.runs.items():
        if count not in kept and (close := getattr(run, "close", None)) is not None:
            close()
    return replace(compiled, runs=kept) if kept else None


def compiled_line(name: str, report: CompileReport, threads: Sequence[int]) -> str:
    """The log line of a compiled forward: how it was obtained, in how long, at which counts."""
    how = {
        "built": "compiled ahead of time",
        "cached": "compiled forward loaded from the cache",
        "jit": "compiled with torch.compile",
    }[report.source]
    counts = ", ".join(map(str, threads))
    return f"{name}: {how} and warmed up in {report.seconds:.1f} s (thread counts {counts})"


def not_compiled_line(name: str) -> str:
    """The log line of a start whose cache lacks the compiled forward: it serves eagerly. A
    start never compiles where the gain is unknown: measured on a 2-core AVX2 EPYC, a first
    start compiled for 92 s, then measured the compiled forward at 0.59x and 1.01x eager's
    speed and served eagerly."""
    return (
        f"{name}: no compiled forward in the cache for these settings: serving it eagerly (a "
        "start never waits for a compile; `poolserve compile` with the same flags builds it "
        "and measures it against eager, and a restart serves it where it pays)"
    )
